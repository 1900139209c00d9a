package deploycheck

import (
	"strings"
	"testing"
)

// heavyModules are the module path prefixes that only these checks need. They
// belong to this package's own go.mod, never to the product's.
var heavyModules = []string{
	"github.com/compose-spec/compose-go",
	"github.com/moby/buildkit",
	"k8s.io/",
	"sigs.k8s.io/kustomize",
}

// goModRequires returns the module paths that a go.mod's require directives name.
func goModRequires(src string) []string {
	var mods []string
	inBlock := false
	for line := range strings.Lines(src) {
		line, _, _ = strings.Cut(line, "//")
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case inBlock && fields[0] == ")":
			inBlock = false
		case inBlock:
			mods = append(mods, fields[0])
		case fields[0] == "require" && len(fields) >= 2 && fields[1] == "(":
			inBlock = true
		case fields[0] == "require" && len(fields) >= 3:
			mods = append(mods, fields[1])
		}
	}
	return mods
}

// heavyRequires returns the problems of a go.mod that requires one of heavyModules.
func heavyRequires(src string) []string {
	var problems []string
	for _, m := range goModRequires(src) {
		for _, h := range heavyModules {
			if strings.HasPrefix(m, h) {
				problems = append(problems, "go.mod requires "+m+", which only test/deploycheck needs (it belongs in test/deploycheck/go.mod)")
			}
		}
	}
	return problems
}

// TestProductModuleHasNoDeployCheckDependencies checks that the product's go.mod
// (the repository root's) requires none of the modules these checks bring in, and
// that the check notices one, in a block or on a require line of its own.
func TestProductModuleHasNoDeployCheckDependencies(t *testing.T) {
	t.Parallel()
	src := readFile(t, "go.mod")
	if len(goModRequires(src)) < 5 {
		t.Fatalf("go.mod: found only %q as requirements", goModRequires(src))
	}
	reportProblems(t, heavyRequires(src))

	for _, mutated := range []string{
		strings.Replace(src, "\nrequire (\n", "\nrequire (\n\tk8s.io/api v0.37.2\n", 1),
		src + "\nrequire github.com/moby/buildkit v0.34.2 // indirect\n",
	} {
		if problems := heavyRequires(mutated); len(problems) != 1 {
			t.Errorf("a go.mod with one heavy requirement: problems %q, want one", problems)
		}
	}
}
