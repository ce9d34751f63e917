package caddyopenapi

// nameTable finds a name among the names a schema declares (its
// properties, the strings of an enum) without hashing the name: a slot
// is chosen from the name's length and three of its bytes, multiplied
// by a factor found when the schema is compiled so that no two names
// share a slot; one string comparison then decides. Names no factor
// separates (two that agree on length and those bytes) make no table:
// newNameTable returns nil and the caller keeps its map.
type nameTable struct {
	mul   uint32
	shift uint8
	slots []nameSlot
}

type nameSlot struct {
	name string
	idx  int32 // the name's index in the list given; -1: an empty slot
}

// nameKey packs what a slot is chosen by.
func nameKey(s string) uint32 {
	if len(s) == 0 {
		return 0
	}
	return uint32(len(s))<<24 ^ uint32(s[0])<<16 ^ uint32(s[len(s)/2])<<8 ^ uint32(s[len(s)-1])
}

// maxTableNames bounds the names a table takes: a larger schema keeps
// its map.
const maxTableNames = 256

// newNameTable builds a table of names (distinct), or returns nil.
func newNameTable(names []string) *nameTable {
	if len(names) == 0 || len(names) > maxTableNames {
		return nil
	}
	keys := make(map[uint32]bool, len(names))
	for _, n := range names {
		k := nameKey(n)
		if keys[k] {
			return nil // no factor separates them
		}
		keys[k] = true
	}
	bitsFor := 1
	for 1<<bitsFor < 2*len(names) {
		bitsFor++
	}
	// a fixed sequence of odd factors: the same document gives the
	// same table
	x := uint32(0x9e3779b9)
	for size := bitsFor; size <= bitsFor+3 && size <= 16; size++ {
		for range 2000 {
			x = x*1664525 + 1013904223
			mul := x | 1
			shift := uint8(32 - size)
			t := &nameTable{mul: mul, shift: shift, slots: make([]nameSlot, 1<<size)}
			for i := range t.slots {
				t.slots[i].idx = -1
			}
			ok := true
			for i, n := range names {
				sl := &t.slots[(nameKey(n)*mul)>>shift]
				if sl.idx >= 0 {
					ok = false
					break
				}
				sl.name, sl.idx = n, int32(i)
			}
			if ok {
				return t
			}
		}
	}
	return nil
}

// find returns the index of name in the list the table was built of,
// or -1.
func (t *nameTable) find(name string) int {
	sl := &t.slots[(nameKey(name)*t.mul)>>t.shift&uint32(len(t.slots)-1)]
	if sl.idx >= 0 && sl.name == name {
		return int(sl.idx)
	}
	return -1
}
