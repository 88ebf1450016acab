// Command plot draws the scale curve of docs/benchmarks.md from the TSV that
// galleon-bench scale writes: x the services served, y the milliseconds
// from one instance change to every sink holding it, both on log scales (the
// figures span three orders of magnitude), one colour per protocol and sink
// count, p99 solid and p50 dashed.
//
//	cd bench && go run ./cmd/plot -in results.tsv -out ../docs/benchmarks-scale.png
package main

import (
	"cmp"
	"encoding/csv"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

func main() {
	in := flag.String("in", "", "the TSV galleon-bench scale wrote (columns protocol, sinks, services, p50_ms, p99_ms, ...)")
	out := flag.String("out", "benchmarks-scale.png", "the PNG to write")
	title := flag.String("title", "One instance change, until every sink holds it", "the plot's title")
	flag.Parse()
	if err := run(*in, *out, *title); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

// curve is one protocol at one sink count: its p50 and p99 by services.
type curve struct {
	name     string
	p50, p99 plotter.XYs
}

func run(in, out, title string) error {
	if in == "" {
		return fmt.Errorf("-in is required: the TSV galleon-bench scale wrote")
	}
	curves, services, err := read(in)
	if err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "services (x 10 instances)"
	p.Y.Label.Text = "ms from the registry report to the last sink"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	var ticks plot.ConstantTicks
	for _, n := range services {
		ticks = append(ticks, plot.Tick{Value: n, Label: thousands(n)})
	}
	p.X.Tick.Marker = ticks
	p.Add(plotter.NewGrid())
	// The curves rise to the right, so the top left is where the legend
	// hides least.
	p.Legend.Top, p.Legend.Left = true, true
	dashed := []vg.Length{vg.Points(4), vg.Points(3)}
	for i, c := range curves {
		for _, s := range []struct {
			xys    plotter.XYs
			dashes []vg.Length
		}{{c.p99, nil}, {c.p50, dashed}} {
			line, points, err := plotter.NewLinePoints(s.xys)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
			line.Dashes, points.Shape = s.dashes, plotutil.Shape(i)
			p.Add(line, points)
			if s.dashes == nil {
				p.Legend.Add(c.name, line, points)
			}
		}
	}
	for _, s := range []struct {
		label  string
		dashes []vg.Length
	}{{"p99", nil}, {"p50", dashed}} {
		p.Legend.Add(s.label, &plotter.Line{LineStyle: draw.LineStyle{Color: color.Black, Width: vg.Points(1), Dashes: s.dashes}})
	}
	return p.Save(18*vg.Centimeter, 13*vg.Centimeter, out)
}

// thousands formats a whole number with thousands separators: 50,000.
func thousands(n float64) string {
	s := strconv.FormatFloat(n, 'f', 0, 64)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// read returns the TSV's curves in the order they first appear, each sorted
// by services, and the services measured, ascending. Columns are found by
// their header names, so the script may add others.
func read(path string) ([]*curve, []float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.Comma, r.Comment = '\t', '#'
	header, err := r.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: header: %w", path, err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	for _, h := range []string{"protocol", "sinks", "services", "p50_ms", "p99_ms"} {
		if _, ok := col[h]; !ok {
			return nil, nil, fmt.Errorf("%s: no %s column in the header", path, h)
		}
	}
	var curves []*curve
	byName := map[string]*curve{}
	var services []float64
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		var v [3]float64
		for i, h := range []string{"services", "p50_ms", "p99_ms"} {
			if v[i], err = strconv.ParseFloat(rec[col[h]], 64); err != nil || v[i] <= 0 {
				line, _ := r.FieldPos(0)
				return nil, nil, fmt.Errorf("%s:%d: %s %q: want a positive number", path, line, h, rec[col[h]])
			}
		}
		name := fmt.Sprintf("%s, %s sinks", rec[col["protocol"]], rec[col["sinks"]])
		c := byName[name]
		if c == nil {
			c = &curve{name: name}
			byName[name] = c
			curves = append(curves, c)
		}
		c.p50 = append(c.p50, plotter.XY{X: v[0], Y: v[1]})
		c.p99 = append(c.p99, plotter.XY{X: v[0], Y: v[2]})
		if !slices.Contains(services, v[0]) {
			services = append(services, v[0])
		}
	}
	if len(curves) == 0 {
		return nil, nil, fmt.Errorf("%s: no rows", path)
	}
	byX := func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) }
	for _, c := range curves {
		slices.SortFunc(c.p50, byX)
		slices.SortFunc(c.p99, byX)
	}
	slices.Sort(services)
	return curves, services, nil
}
