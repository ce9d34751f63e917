package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var levelColors = map[int]color.Color{
	50:  color.RGBA{R: 0x9e, G: 0xc5, B: 0xe8, A: 0xff},
	300: color.RGBA{R: 0x1f, G: 0x5f, B: 0xa8, A: 0xff},
}

// drawChart draws one horizontal bar per scenario and connection level:
// median requests/s with a min-max whisker and the value written beside
// it, scenarios top to bottom in the report's order.
func drawChart(r *Report, out string) error {
	var names []string
	for _, s := range r.Scenarios {
		if len(r.Samples[s.Name]) > 0 {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("no samples to draw")
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
	for li, c := range connLevels {
		vals := make(plotter.Values, n)
		wh := &whiskers{offset: barW * vg.Length(float64(li)-0.5) * -1}
		for i, name := range names {
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
		bars, err := plotter.NewBarChart(vals, barW)
		if err != nil {
			return err
		}
		bars.Horizontal = true
		bars.Color = levelColors[c]
		bars.LineStyle.Width = 0
		// 300 connections drawn below 50 within each row
		bars.Offset = wh.offset
		p.Add(bars, wh)
		p.Legend.Add(fmt.Sprintf("%d connections", c), bars)
	}
	p.X.Max = maxX * 1.18 // room for the value labels
	p.Add(plotter.NewGrid())
	height := vg.Length(n)*2.4*barW + 2*vg.Inch
	return p.Save(11*vg.Inch, height, out)
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
