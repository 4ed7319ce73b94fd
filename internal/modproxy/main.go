// Command modproxy writes a Go module proxy, as a directory that
// GOPROXY=file:///... serves, holding the modules in the given directories at
// one version: for each, the .info, .mod and .zip files and the version list
// that the module proxy protocol names (go help goproxy). scripts/release-check
// installs the prepared release from it, as a consumer would from the module
// proxy once the tags are pushed.
//
//	modproxy -version v0.1.0 -out DIR MODULEDIR...
//
// Each MODULEDIR holds a go.mod; its zip is made as the go command makes one
// from a tag (golang.org/x/mod/zip): without nested modules or vendor
// directories, and checked against the same limits.
//
// It is a module of its own so that golang.org/x/mod stays out of the graph
// of every application that imports mongolock.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

func main() {
	version := flag.String("version", "", "the version to serve every module at (vX.Y.Z)")
	out := flag.String("out", "", "the proxy's directory (created)")
	flag.Parse()
	if err := run(*version, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run(version, out string, dirs []string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("-version %q is not a canonical semantic version", version)
	}
	if out == "" || len(dirs) == 0 {
		return errors.New("usage: modproxy -version vX.Y.Z -out DIR MODULEDIR [MODULEDIR ...]")
	}
	for _, dir := range dirs {
		if err := add(out, dir, version); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
	}
	return nil
}

// add writes the module in dir at version into the proxy out.
func add(out, dir, version string) error {
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	path := modfile.ModulePath(gomod)
	if path == "" {
		return errors.New("go.mod names no module")
	}
	m := module.Version{Path: path, Version: version}
	if err := module.Check(m.Path, m.Version); err != nil {
		return err
	}
	escaped, err := module.EscapePath(path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(vdir, version+".zip"))
	if err != nil {
		return err
	}
	if err := zip.CreateFromDir(f, m, dir); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for name, b := range map[string][]byte{
		version + ".mod":  gomod,
		version + ".info": info,
		"list":            []byte(version + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), b, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("%s@%s\n", path, version)
	return nil
}
