package main

import (
	"fmt"
	"image/color"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// implColor gives each implementation the same color in every panel.
var implColor = map[string]color.Color{
	"raw":       color.RGBA{R: 150, G: 150, B: 150, A: 255},
	"mongolock": color.RGBA{R: 31, G: 119, B: 180, A: 255},
	"baseline":  color.RGBA{R: 255, G: 127, B: 14, A: 255},
}

// A bar is one bar of a panel.
type bar struct {
	tick  string // the name under it
	impl  string // its color
	value float64
	label string // printed above it
}

// A refLine is a dashed horizontal line across a panel, a bound or a limit,
// named in the panel's title.
type refLine struct {
	y     float64
	label string
}

// plot draws the figure: for workloads A–E one column each, rows
// acquisitions/s, wait p99 and operations per acquisition; a row for
// workload F, one for workload G and one for workload H.
func (r *report) plot(path string) error {
	const cols = 5
	var rows [][]*plot.Plot
	if len(r.Results) > 0 {
		rows = append(rows, r.resultPanels(cols)...)
	}
	if len(r.Holds) > 0 {
		rows = append(rows, r.holdPanels(cols))
	}
	if len(r.Standby) > 0 {
		rows = append(rows, r.standbyPanels(cols))
	}
	if len(r.Elections) > 0 {
		rows = append(rows, r.electionPanels(cols))
	}
	if len(rows) == 0 {
		return nil
	}
	// plot.Align wants every panel; an empty one stands in for a workload
	// that did not run.
	for _, row := range rows {
		for i, p := range row {
			if p == nil {
				row[i] = emptyPanel()
			}
		}
	}
	return r.draw(path, rows, cols)
}

// draw draws rows of panels, cols each, under the figure's title, into
// the PNG file path.
func (r *report) draw(path string, rows [][]*plot.Plot, cols int) error {
	const titleH = vg.Length(52)
	width, height := vg.Length(cols)*3.3*vg.Inch, vg.Length(len(rows))*2.9*vg.Inch+titleH
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(100))
	dc := draw.New(img)
	title := fmt.Sprintf("mongolock vs raw driver round trips (bound) vs DistributedLock.MongoDB's algorithm (baseline) — %s, %d CPUs", r.Server, r.CPUs)
	sty := draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 15), Handler: plot.DefaultTextHandler, XAlign: draw.XCenter, YAlign: draw.YTop}
	dc.FillText(sty, vg.Point{X: width / 2, Y: height - 8}, title)
	sty.Font.Size = 11
	sub := fmt.Sprintf("A–E: %g s per implementation; wait = acquire call to handle; raw excludes no one, so B–D show the serial bound instead of its rate. "+
		"F: expiry %g s, cadence %g s, %d cadences. G: hold %v, away %v, %g s window. H: %d processes, lead %v, expiry %v, %g s window.",
		r.WindowS, r.HoldExpiry, r.HoldExpiry/3, holdCadences, standbyHold, standbyAway, r.StandbyS,
		electionProcs, electionHold, electionExpiry, r.ElectionS)
	dc.FillText(sty, vg.Point{X: width / 2, Y: height - 30}, sub)
	dc.Max.Y -= titleH

	tiles := draw.Tiles{Rows: len(rows), Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 6, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3}
	canvases := plot.Align(rows, tiles, dc)
	for j, row := range rows {
		for i, p := range row {
			p.Draw(canvases[j][i])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// resultPanels are workloads A–E's rows, a column each: acquisitions/s,
// wait p99 and operations per acquisition.
func (r *report) resultPanels(cols int) [][]*plot.Plot {
	acq, wait, ops := make([]*plot.Plot, cols), make([]*plot.Plot, cols), make([]*plot.Plot, cols)
	for i, w := range workloads {
		var acqBars, waitBars, opsBars []bar
		for _, im := range impls {
			x := r.result(w.id, im.name)
			if x == nil {
				continue
			}
			// raw excludes no one: on one shared name its rate is not a
			// lock's and would dwarf the others; the serial bound stands
			// for it there.
			if !(w.shared && im.name == "raw") {
				acqBars = append(acqBars, bar{im.name, im.name, x.AcqPerSec, num(x.AcqPerSec, "")})
			}
			waitBars = append(waitBars, bar{im.name, im.name, x.WaitP99MS, num(x.WaitP99MS, "")})
			opsBars = append(opsBars, bar{im.name, im.name, x.OpsPerAcq, num(x.OpsPerAcq, "")})
		}
		if len(waitBars) == 0 {
			continue
		}
		var refs []refLine
		if bound := r.serialBound(ms(w.criticalSection)); w.shared && bound > 0 {
			refs = append(refs, refLine{bound, fmt.Sprintf("serial bound %.0f", bound)})
		}
		acq[i] = barPanel(w.id+": acquisitions/s", "", acqBars, refs)
		wait[i] = barPanel(w.id+": wait p99 (ms)", "", waitBars, nil)
		ops[i] = barPanel(w.id+": operations / acquisition", "", opsBars, nil)
	}
	for i := range acq {
		if acq[i] != nil {
			acq[i].Y.Label.Text, wait[i].Y.Label.Text, ops[i].Y.Label.Text = "acquisitions/s", "ms", "commands"
			break
		}
	}
	return [][]*plot.Plot{acq, wait, ops}
}

// holdPanels is workload F's row: extension round trips per cadence,
// goroutines added, heap and stack per held lock, and how many of the N
// locks were held to the end.
func (r *report) holdPanels(cols int) []*plot.Plot {
	n := r.largestHoldN()
	var ext, gor, heap, stack, kept []bar
	for _, im := range impls {
		for _, size := range []int{n / 10, n} {
			h := r.hold(im.name, size)
			if h == nil {
				continue
			}
			tick := fmt.Sprintf("%s\nN=%d", im.name, size)
			if im.name == "mongolock" {
				ext = append(ext, bar{tick, im.name, h.ExtensionsPerCadence, num(h.ExtensionsPerCadence, "")})
			}
			// raw holds nothing but documents: only the two lockers.
			if im.name != "raw" {
				d := float64(h.GoroutinesDuring - h.GoroutinesBefore)
				gor = append(gor, bar{tick, im.name, d, fmt.Sprintf("%+.0f", d)})
			}
			if size == n {
				tick = im.name
				heap = append(heap, bar{tick, im.name, h.HeapPerLockB, num(h.HeapPerLockB, "")})
				stack = append(stack, bar{tick, im.name, h.StackPerLockB, num(h.StackPerLockB, "")})
				k := float64(h.Acquired - h.LostByEnd)
				kept = append(kept, bar{tick, im.name, k, fmt.Sprintf("%.0f", k)})
			}
		}
	}
	limit := float64((n + 499) / 500)
	row := []*plot.Plot{
		barPanel("F: extension round trips / cadence", "round trips", ext, []refLine{{limit, fmt.Sprintf("target ≤ %.0f", limit)}}),
		barPanel("F: goroutines added while holding", "goroutines", gor, nil),
		barPanel(fmt.Sprintf("F: heap per held lock (N=%d)", n), "bytes", heap, nil),
		barPanel(fmt.Sprintf("F: stack per held lock (N=%d)", n), "bytes", stack, nil),
		barPanel(fmt.Sprintf("F: of N=%d, held at the end", n), "locks", kept, nil),
	}
	return row[:cols]
}

// standbyPanels is workload G's row: commands/s, takeover p50 and max, and
// acquisitions in the window, per implementation and process count.
func (r *report) standbyPanels(cols int) []*plot.Plot {
	var ops, p50, worst, acq []bar
	for _, procs := range standbySizes {
		for _, im := range impls {
			x := r.standby(im.name, procs)
			if x == nil {
				continue
			}
			tick := fmt.Sprintf("%s\nP=%d", im.name, procs)
			ops = append(ops, bar{tick, im.name, x.OpsPerSec, num(x.OpsPerSec, "")})
			p50 = append(p50, bar{tick, im.name, x.TakeoverP50MS, num(x.TakeoverP50MS, "")})
			worst = append(worst, bar{tick, im.name, x.TakeoverMaxMS, num(x.TakeoverMaxMS, "")})
			acq = append(acq, bar{tick, im.name, float64(x.Acquisitions), fmt.Sprint(x.Acquisitions)})
		}
	}
	row := []*plot.Plot{
		barPanel("G standby: commands/s", "commands/s", ops, nil),
		barPanel("G: takeover p50 (ms)", "ms", p50, nil),
		barPanel("G: takeover max (ms)", "ms", worst, nil),
		barPanel("G: acquisitions in the window", "acquisitions", acq, nil),
	}
	for len(row) < cols {
		row = append(row, nil) // drawn empty
	}
	return row[:cols]
}

// electionPanels is workload H's row: commands/s, and the failover p50 and
// max after a resignation and after a stop, per implementation.
func (r *report) electionPanels(cols int) []*plot.Plot {
	var ops, resign, stop, worst []bar
	for _, im := range impls {
		x := r.election(im.name)
		if x == nil {
			continue
		}
		ops = append(ops, bar{im.name, im.name, x.OpsPerSec, num(x.OpsPerSec, "")})
		resign = append(resign, bar{im.name, im.name, x.Resign.P50MS, num(x.Resign.P50MS, "")})
		stop = append(stop, bar{im.name, im.name, x.Stop.P50MS, num(x.Stop.P50MS, "")})
		worst = append(worst, bar{im.name + "\nresign", im.name, x.Resign.MaxMS, num(x.Resign.MaxMS, "")},
			bar{im.name + "\nstop", im.name, x.Stop.MaxMS, num(x.Stop.MaxMS, "")})
	}
	row := []*plot.Plot{
		barPanel("H election: commands/s", "commands/s", ops, nil),
		barPanel("H: failover p50 after a resignation (ms)", "ms", resign, nil),
		barPanel("H: failover p50 after a stop (ms)", "ms", stop, nil),
		barPanel("H: failover max (ms)", "ms", worst, nil),
	}
	for len(row) < cols {
		row = append(row, nil) // drawn empty
	}
	return row[:cols]
}

// barPanel draws bars with their values above them, and dashed reference
// lines.
func barPanel(title, yLabel string, bars []bar, refs []refLine) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = yLabel
	if len(bars) == 0 {
		return p
	}
	top := 0.0
	var ticks []string
	for i, b := range bars {
		bc, err := plotter.NewBarChart(plotter.Values{max(b.value, 0)}, vg.Points(34))
		if err != nil {
			continue // a NaN or infinite figure: no bar
		}
		bc.XMin = float64(i)
		bc.Color = implColor[b.impl]
		bc.LineStyle.Width = 0
		p.Add(bc)
		lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: float64(i), Y: max(b.value, 0)}}, Labels: []string{b.label}})
		if err == nil {
			lbl.TextStyle[0].XAlign = draw.XCenter
			lbl.Offset = vg.Point{Y: vg.Points(3)}
			p.Add(lbl)
		}
		ticks = append(ticks, b.tick)
		top = max(top, b.value)
	}
	for _, ref := range refs {
		line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: ref.y}, {X: float64(len(bars)) - 0.5, Y: ref.y}})
		if err != nil {
			continue
		}
		line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		line.Color = color.RGBA{R: 200, A: 255}
		p.Add(line)
		// Named in the title: a label on the line would cover bars.
		p.Title.Text += "\n- - - " + ref.label
		top = max(top, ref.y)
	}
	p.NominalX(ticks...)
	p.Y.Tick.Marker = plainTicks{}
	if len(bars) > 3 {
		p.X.Tick.Label.Font.Size = vg.Points(8)
	}
	p.X.Min, p.X.Max = -0.5, float64(len(bars))-0.5
	p.Y.Min, p.Y.Max = 0, top*1.15
	if top == 0 {
		p.Y.Max = 1
	}
	return p
}

func emptyPanel() *plot.Plot {
	p := plot.New()
	p.HideAxes()
	return p
}

// plainTicks are gonum's default ticks, labelled without trailing zeros.
type plainTicks struct{}

func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}
