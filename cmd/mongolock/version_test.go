package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// newestRelease returns the tag of CHANGELOG.md's newest release ("v1.2.0"
// for a "## [1.2.0] - 2026-01-31" section), "" if it has none; its first
// section must be Unreleased.
func newestRelease(t *testing.T, changelog string) string {
	t.Helper()
	sections := regexp.MustCompile(`(?m)^## \[([^\]]*)\]`).FindAllStringSubmatch(changelog, 2)
	if len(sections) == 0 || sections[0][1] != "Unreleased" {
		t.Fatalf("CHANGELOG.md: the first section is not ## [Unreleased]: %v", sections)
	}
	if len(sections) == 1 {
		return ""
	}
	v := sections[1][1]
	if !regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(v) {
		t.Fatalf("CHANGELOG.md: the newest release, %q, is not a semantic version", v)
	}
	return "v" + v
}

// mongolock --version names the changelog's newest release, or says that
// there is none yet.
func TestVersionFollowsTheChangelog(t *testing.T) {
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	want := newestRelease(t, string(b))
	if release != want {
		t.Errorf("the release constant is %q; CHANGELOG.md's newest release is %q", release, want)
	}
	r := invoke(t, "", "--version")
	requireCode(t, r, 0, "--version")
	// The tests' binary is built from this source tree.
	f := strings.Fields(r.stdout)
	printed, from := "", "unreleased"
	if len(f) > 1 {
		printed = f[1]
	}
	if want != "" {
		from = want
	}
	if printed != from && printed != from+"+dev" {
		t.Errorf("mongolock --version: %q; want %s (CHANGELOG.md's newest release: %q)", strings.TrimSpace(r.stdout), from, want)
	}
}

func TestNewestReleaseIsReadFromTheChangelog(t *testing.T) {
	for changelog, want := range map[string]string{
		"# Changelog\n\n## [Unreleased]\n\n### Added\n- x\n":                                      "",
		"## [Unreleased]\n\n## [0.3.0] - 2026-12-01\n\n## [0.2.0] - 2026-11-01\n":                 "v0.3.0",
		"## [Unreleased]\n### Fixed\n- y\n\n## [1.0.0-rc.1] - 2027-01-01\n\n[0.3.0]: https://x\n": "v1.0.0-rc.1",
	} {
		if got := newestRelease(t, changelog); got != want {
			t.Errorf("newestRelease(%q) = %q, want %q", changelog, got, want)
		}
	}
}

func TestVersionOfEachBuild(t *testing.T) {
	build := func(version string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/mongolock/mongolock", Version: version}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	const rev = "0123456789abcdef0123456789abcdef01234567"
	for _, c := range []struct {
		bi                    *debug.BuildInfo
		release, tagged, want string
	}{
		// go install github.com/mongolock/mongolock/cmd/mongolock@v0.3.0
		{build("v0.3.0"), "v0.3.0", "", "v0.3.0"},
		{build("v0.3.0"), "", "", "v0.3.0"},
		// From a checkout, before the first release and after one.
		{build("(devel)"), "", "", "unreleased"},
		{build("(devel)", "vcs.revision", rev, "vcs.modified", "true"), "", "", "unreleased 0123456789ab+dirty"},
		{build("v0.0.0-20261126105515-0123456789ab", "vcs.revision", rev, "vcs.modified", "false"), "", "", "unreleased 0123456789ab"},
		{build("(devel)", "vcs.revision", rev), "v0.3.0", "", "v0.3.0+dev 0123456789ab"},
		{build("v0.3.1-0.20261126105515-0123456789ab", "vcs.revision", rev), "v0.3.0", "", "v0.3.0+dev 0123456789ab"},
		{build("v0.3.0", "vcs.revision", rev), "v0.3.0", "", "v0.3.0 0123456789ab"},
		{build("v0.3.0+dirty", "vcs.revision", rev, "vcs.modified", "true"), "v0.3.0", "", "v0.3.0+dev 0123456789ab+dirty"},
		// The release build (GoReleaser), with the VCS stamp or without.
		{build("v0.3.0", "vcs.revision", rev, "vcs.modified", "false"), "v0.3.0", "v0.3.0", "v0.3.0 0123456789ab"},
		{build("(devel)"), "v0.3.0", "v0.3.0", "v0.3.0"},
		{build("v0.3.0+dirty", "vcs.revision", rev, "vcs.modified", "true"), "v0.3.0", "v0.3.0", "v0.3.0 0123456789ab+dirty"},
	} {
		if got := versionOf(c.bi, c.release, c.tagged); got != c.want {
			t.Errorf("versionOf(%s %v, release %q, tagged %q) = %q, want %q", c.bi.Main.Version, c.bi.Settings, c.release, c.tagged, got, c.want)
		}
	}
}

// The release build (.goreleaser.yaml) sets, from the tag, the variable that
// mongolock --version prints: built with its -X flag, the binary names the
// tag whatever the changelog says.
func TestReleaseBuildPrintsItsTag(t *testing.T) {
	b, err := os.ReadFile("../../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`-X (main\.\w+)=\{\{ *\.Tag *\}\}`).FindSubmatch(b)
	if m == nil {
		t.Fatal(".goreleaser.yaml: no ldflags -X main.NAME={{ .Tag }}")
	}
	bin := filepath.Join(t.TempDir(), "mongolock")
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X "+string(m[1])+"=v9.8.7", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(out)); len(f) < 2 || f[1] != "v9.8.7" {
		t.Errorf("mongolock --version of a release build of v9.8.7: %q", out)
	}
}
