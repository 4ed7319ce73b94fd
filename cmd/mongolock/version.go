package main

import "runtime/debug"

// release is the newest release in CHANGELOG.md, as its tag ("v1.2.0"), or
// "" while the changelog has only its Unreleased section. A release updates
// both (scripts/release-prepare); a test fails when they disagree.
const release = "v1.0.0"

// tagged is the tag of the release build that made this binary, set by the
// linker (.goreleaser.yaml: -X main.tagged={{.Tag}}); "" in any other build.
// The build information alone cannot say it: a build may carry no VCS
// stamp, or see a tree that the release's own outputs made dirty.
var tagged string

// versionOf is the version of the binary bi describes, built from the
// given release or after it: the tag of a release build (tagged) or of go
// install ...@version; built from a checkout, the release it follows
// (release+dev after a release, "unreleased" before the first) and the
// commit, if known.
func versionOf(bi *debug.BuildInfo, release, tagged string) string {
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
	case tagged != "":
		return tagged + rev + dirty
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

// moduleVersion is the version this binary was built from (versionOf).
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	return versionOf(bi, release, tagged)
}
