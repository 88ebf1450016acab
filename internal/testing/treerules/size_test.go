package treerules

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"
)

// The size rule of docs/authoring-adapters.md's checklist.
const (
	maxFuncLines = 80
	maxNesting   = 4
)

// TestAdapterFunctionsAreSmall: no function in an adapter's product code is longer than 80
// lines or nests its statements more than 4 deep, so each reads on one screen.
func TestAdapterFunctionsAreSmall(t *testing.T) {
	base := root(t)
	funcs := 0
	for _, p := range packages(t) {
		if !under(p.dir, "adapters") {
			continue
		}
		for _, rel := range p.files {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, filepath.Join(base, rel), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				funcs++
				name := funcName(fn)
				lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
				if lines > maxFuncLines {
					t.Errorf("%s: %s is %d lines (at most %d)", rel, name, lines, maxFuncLines)
				}
				if depth, at := nesting(fn.Body); depth > maxNesting {
					t.Errorf("%s:%d: %s nests %d deep (at most %d)", rel, fset.Position(at).Line, name, depth, maxNesting)
				}
			}
		}
	}
	if funcs == 0 {
		t.Fatal("no adapter function was read")
	}
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	recv := fn.Recv.List[0].Type
	if star, ok := recv.(*ast.StarExpr); ok {
		recv = star.X
	}
	if idx, ok := recv.(*ast.IndexExpr); ok {
		recv = idx.X
	}
	if id, ok := recv.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// nesting is the deepest nesting of statements in body, and where it is: each if, for, range,
// switch, select and function literal is one level; an else-if continues its if's level, and
// the cases of a switch or select sit at the switch's.
func nesting(body *ast.BlockStmt) (int, token.Pos) {
	best, at := 0, body.Pos()
	var walk func(n ast.Node, depth int)
	visitBlock := func(stmts []ast.Stmt, depth int) {
		for _, s := range stmts {
			walk(s, depth)
		}
	}
	walk = func(n ast.Node, depth int) {
		if n == nil {
			return
		}
		deeper := depth + 1
		note := func() {
			if deeper > best {
				best, at = deeper, n.Pos()
			}
		}
		switch s := n.(type) {
		case *ast.IfStmt:
			note()
			visitBlock(s.Body.List, deeper)
			inspectExprs(s.Cond, deeper, walk)
			for e := s.Else; e != nil; {
				if elif, ok := e.(*ast.IfStmt); ok {
					visitBlock(elif.Body.List, deeper)
					inspectExprs(elif.Cond, deeper, walk)
					e = elif.Else
					continue
				}
				visitBlock(e.(*ast.BlockStmt).List, deeper)
				break
			}
		case *ast.ForStmt:
			note()
			visitBlock(s.Body.List, deeper)
		case *ast.RangeStmt:
			note()
			visitBlock(s.Body.List, deeper)
		case *ast.SwitchStmt:
			note()
			for _, c := range s.Body.List {
				visitBlock(c.(*ast.CaseClause).Body, deeper)
			}
		case *ast.TypeSwitchStmt:
			note()
			for _, c := range s.Body.List {
				visitBlock(c.(*ast.CaseClause).Body, deeper)
			}
		case *ast.SelectStmt:
			note()
			for _, c := range s.Body.List {
				visitBlock(c.(*ast.CommClause).Body, deeper)
			}
		case *ast.BlockStmt:
			visitBlock(s.List, depth)
		case *ast.LabeledStmt:
			walk(s.Stmt, depth)
		case *ast.FuncLit:
			note()
			visitBlock(s.Body.List, deeper)
		default:
			inspectExprs(n, depth, walk)
		}
	}
	visitBlock(body.List, 0)
	return best, at
}

// inspectExprs finds the function literals inside a statement or expression that is not
// itself a block (an assignment, a call, a go or defer statement) and walks their bodies.
func inspectExprs(n ast.Node, depth int, walk func(ast.Node, int)) {
	if n == nil {
		return
	}
	ast.Inspect(n, func(c ast.Node) bool {
		if lit, ok := c.(*ast.FuncLit); ok {
			walk(lit, depth)
			return false
		}
		return true
	})
}

// TestNestingCounts holds the nesting measure to hand-counted examples, so that the rule above
// cannot pass by measuring nothing.
func TestNestingCounts(t *testing.T) {
	cases := map[string]int{
		`x := 1`:       0,
		`if a { b() }`: 1,
		`if a { b() } else if c { d() } else { e() }`:               1,
		`for { if a { switch x { case 1: for range y { g() } } } }`: 4,
		`go func() { for { select { case <-c: if a { b() } } } }()`: 4,
		`f := func() { if a { b() } }; f()`:                         2,
	}
	for src, want := range cases {
		f, err := parser.ParseFile(token.NewFileSet(), "x.go", "package x\nfunc x() {"+src+"}", 0)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		got, _ := nesting(f.Decls[0].(*ast.FuncDecl).Body)
		if got != want {
			t.Errorf("nesting of %q = %d, want %d", src, got, want)
		}
	}
}
