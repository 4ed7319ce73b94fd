package main

import "runtime/debug"

// release is the newest release in CHANGELOG.md, as its tag ("v1.2.0"), or
// "" while the changelog has only its Unreleased section. A release updates
// both; a test fails when they disagree.
const release = ""

// versionOf is the version of the binary bi describes, built from the
// given release or after it: a release's tag when installed with go install
// ...@version; built from a checkout, the release it follows (release+dev
// after a release, "unreleased" before the first) and the commit, if known.
func versionOf(bi *debug.BuildInfo, release string) string {
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = " " + s.Value[:min(12, len(s.Value))]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	if rev == "" {
		dirty = ""
	}
	v := bi.Main.Version
	switch {
	case rev == "" && v != "" && v != "(devel)":
		// From the module proxy: the go command stamped the version asked for.
		return v
	case release == "":
		return "unreleased" + rev + dirty
	case v == release && dirty == "":
		// A checkout of the release's own tag.
		return release + rev
	default:
		return release + "+dev" + rev + dirty
	}
}
