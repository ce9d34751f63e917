package main

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var levelColors = map[int]color.Color{
	50:  color.RGBA{R: 0x9e, G: 0xc5, B: 0xe8, A: 0xff},
	300: color.RGBA{R: 0x1f, G: 0x5f, B: 0xa8, A: 0xff},
}

// drawChart draws the load rounds (one horizontal bar per scenario:
// median requests/s with a min-max whisker and the value written beside
// it, scenarios top to bottom in the report's order) and, below, the extra
// parts' throughput (TLS, gzip, connection scaling), into one PNG.
func drawChart(r *Report, out string) error {
	var plots []*plot.Plot
	var heights []vg.Length
	if p, h, err := loadPlot(r); err == nil {
		plots, heights = append(plots, p), append(heights, h)
	}
	if p, h, ok := extrasPlot(r); ok {
		plots, heights = append(plots, p), append(heights, h)
	}
	if len(plots) == 0 {
		return fmt.Errorf("no samples to draw")
	}
	var total vg.Length
	for _, h := range heights {
		total += h
	}
	const width = 11 * vg.Inch
	img := vgimg.New(width, total)
	dc := draw.New(img)
	above := vg.Length(0)
	for i, p := range plots {
		// the canvas of plot i: from total-above-h up to total-above
		p.Draw(draw.Crop(dc, 0, 0, total-above-heights[i], -above))
		above += heights[i]
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		return err
	}
	return f.Close()
}

// loadPlot is the load rounds' chart and its height.
func loadPlot(r *Report) (*plot.Plot, vg.Length, error) {
	var names []string
	for _, s := range r.Scenarios {
		if len(r.Samples[s.Name]) > 0 {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		return nil, 0, fmt.Errorf("no samples to draw")
	}
	n := len(names)
	p := plot.New()
	rounds := fmt.Sprintf("median of %d rounds", r.Rounds)
	if r.Rounds == 1 {
		rounds = "1 round"
	}
	p.Title.Text = fmt.Sprintf("Requests/s through each proxy, pinned to one core (%s, whiskers: min-max) - %s", rounds, r.Date)
	p.X.Label.Text = "requests per second (higher is better)"
	p.X.Min = 0
	// the first scenario at the top
	labels := make([]string, n)
	for i, name := range names {
		labels[n-1-i] = "  " + name
	}
	p.NominalY(labels...)
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.XOffs = -vg.Points(10)
	p.Legend.YOffs = vg.Points(10)

	barW := vg.Points(9)
	var maxX float64
	// one bar per row, at its own level (an HTTP/2 row's is its
	// connections, each with h2Streams streams)
	levels := append(append([]int(nil), connLevels...), h2Conns)
	for _, c := range levels {
		vals := make(plotter.Values, n)
		wh := &whiskers{offset: barW * 0.5}
		drawn := false
		for i, name := range names {
			if r.level(name) != c {
				continue
			}
			drawn = true
			st := r.rps(name, c)
			y := n - 1 - i
			if st.valid() {
				vals[y] = st.Med
				wh.rows = append(wh.rows, whiskerRow{y: float64(y), med: st.Med, min: st.Min, max: st.Max})
				if st.Max > maxX {
					maxX = st.Max
				}
			}
		}
		if !drawn {
			continue
		}
		bars, err := plotter.NewBarChart(vals, barW)
		if err != nil {
			return nil, 0, err
		}
		bars.Horizontal = true
		bars.Color = levelColors[c]
		bars.LineStyle.Width = 0
		// (each row has one bar, at its own level)
		bars.Offset = wh.offset
		p.Add(bars, wh)
		legend := fmt.Sprintf("%d connections", c)
		if c == h2Conns {
			legend = fmt.Sprintf("HTTP/2: %d connections x %d streams", h2Conns, h2Streams)
		}
		p.Legend.Add(legend, bars)
	}
	p.X.Max = maxX * 1.18 // room for the value labels
	p.Add(plotter.NewGrid())
	return p, vg.Length(n)*2.4*barW + 2*vg.Inch, nil
}

// extrasPlot charts the extra parts measured in requests per second: TLS
// handshakes and keep-alive, gzip, and each connection-scaling level, one
// bar per proxy, median with min-max whiskers.
func extrasPlot(r *Report) (*plot.Plot, vg.Length, bool) {
	type bar struct {
		label string
		st    Stat
	}
	var bars []bar
	for _, x := range r.Extras {
		if x.Err != "" || len(x.Rounds) == 0 || x.Part == "latency" || x.Part == "idle" || x.Part == "slowloris" {
			continue
		}
		bars = append(bars, bar{fmt.Sprintf("  %s %s: %s", x.Part, x.Case, x.Proxy), stat(x.Rounds)})
	}
	if len(bars) == 0 {
		return nil, 0, false
	}
	n := len(bars)
	p := plot.New()
	p.Title.Text = fmt.Sprintf("TLS 1.3, gzip and connection scaling: requests/s (handshakes/s for TLS handshakes) - %s", r.Date)
	p.X.Label.Text = "per second (higher is better)"
	p.X.Min = 0
	labels := make([]string, n)
	vals := make(plotter.Values, n)
	barW := vg.Points(9)
	wh := &whiskers{}
	var maxX float64
	for i, b := range bars {
		y := n - 1 - i
		labels[y] = b.label
		vals[y] = b.st.Med
		wh.rows = append(wh.rows, whiskerRow{y: float64(y), med: b.st.Med, min: b.st.Min, max: b.st.Max})
		maxX = max(maxX, b.st.Max)
	}
	p.NominalY(labels...)
	bc, err := plotter.NewBarChart(vals, barW)
	if err != nil {
		return nil, 0, false
	}
	bc.Horizontal = true
	bc.Color = levelColors[300]
	bc.LineStyle.Width = 0
	p.Add(bc, wh)
	p.X.Max = maxX * 1.18
	p.Add(plotter.NewGrid())
	return p, vg.Length(n)*1.6*barW + 1.5*vg.Inch, true
}

type whiskerRow struct{ y, med, min, max float64 }

// whiskers draws min-max lines and value labels at a vertical offset
// (in drawing units) matching a bar series.
type whiskers struct {
	rows   []whiskerRow
	offset vg.Length
}

func (w *whiskers) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	ls := draw.LineStyle{Color: color.Black, Width: vg.Points(0.8)}
	ts := plt.Y.Tick.Label
	ts.Font.Size = vg.Points(7)
	ts.XAlign = draw.XLeft
	ts.YAlign = draw.YCenter
	for _, r := range w.rows {
		y := trY(r.y) + w.offset
		x0, x1 := trX(r.min), trX(r.max)
		c.StrokeLine2(ls, x0, y, x1, y)
		c.StrokeLine2(ls, x0, y-vg.Points(2.5), x0, y+vg.Points(2.5))
		c.StrokeLine2(ls, x1, y-vg.Points(2.5), x1, y+vg.Points(2.5))
		c.FillText(ts, vg.Point{X: x1 + vg.Points(3), Y: y}, humanRPS(r.med))
	}
}

func humanRPS(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}
