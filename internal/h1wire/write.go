package h1wire

import "bufio"

// WriteField writes the field line "k: v\r\n" to bw, in one copy when it
// fits in bw's free space (four WriteString calls per field were 5% of a
// proxied request's instructions, callgrind).
func WriteField(bw *bufio.Writer, k, v string) {
	if len(k)+len(v)+4 > bw.Available() {
		bw.WriteString(k)
		bw.WriteString(": ")
		bw.WriteString(v)
		bw.WriteString("\r\n")
		return
	}
	b := bw.AvailableBuffer()
	b = append(b, k...)
	b = append(b, ':', ' ')
	b = append(b, v...)
	b = append(b, '\r', '\n')
	bw.Write(b)
}
