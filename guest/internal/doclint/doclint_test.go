package doclint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// moduleRoot is the guest module's directory, relative to this package.
const moduleRoot = "../.."

func TestEveryPackageAndExportedIdentifierHasADocComment(t *testing.T) {
	dirs := map[string]bool{}
	filepath.WalkDir(moduleRoot, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			dirs[filepath.Dir(p)] = true
		}
		return nil
	})
	for dir := range dirs {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for name, pkg := range pkgs {
			hasDoc := false
			for _, f := range pkg.Files {
				hasDoc = hasDoc || f.Doc != nil
				for _, decl := range f.Decls {
					checkDecl(t, fset, decl)
				}
			}
			if !hasDoc {
				t.Errorf("package %s (%s) has no package doc comment", name, dir)
			}
		}
	}
}

func checkDecl(t *testing.T, fset *token.FileSet, decl ast.Decl) {
	switch d := decl.(type) {
	case *ast.FuncDecl:
		if d.Name.IsExported() && d.Doc == nil && (d.Recv == nil || exportedRecv(d.Recv)) {
			t.Errorf("%s: %s has no doc comment", fset.Position(d.Pos()), d.Name.Name)
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch sp := s.(type) {
			case *ast.TypeSpec:
				if sp.Name.IsExported() && sp.Doc == nil && d.Doc == nil {
					t.Errorf("%s: type %s has no doc comment", fset.Position(sp.Pos()), sp.Name.Name)
				}
			case *ast.ValueSpec:
				for _, n := range sp.Names {
					if n.IsExported() && sp.Doc == nil && d.Doc == nil {
						t.Errorf("%s: %s has no doc comment", fset.Position(n.Pos()), n.Name)
					}
				}
			}
		}
	}
}

func exportedRecv(r *ast.FieldList) bool {
	typ := r.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.IsExported()
}
