package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// definedCLI is a cli with its commands and flags defined, as mongolock
// runs them.
func definedCLI() *cli {
	c := &cli{}
	c.define()
	return c
}

// completion prints a script for each shell that names every command and
// every flag of every command, taken from the command's own definitions;
// bash's is valid bash and completes commands, flags and a flag's value.
func TestCompletionScriptsNameEveryCommandAndFlag(t *testing.T) {
	t.Parallel()
	c := definedCLI()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := invoke(t, "", "completion", shell)
		requireCode(t, r, 0, "completion "+shell)
		for _, cmd := range c.commands {
			if !strings.Contains(r.stdout, cmd.name) {
				t.Errorf("completion %s: no command %s", shell, cmd.name)
			}
			cmd.flags.VisitAll(func(f *flag.Flag) {
				want := "--" + f.Name
				if shell == "fish" {
					want = "__fish_seen_subcommand_from " + cmd.name + "' -l " + f.Name
				}
				if !strings.Contains(r.stdout, want) {
					t.Errorf("completion %s: no %s of %s", shell, want, cmd.name)
				}
			})
		}
		if shell == "bash" {
			for _, cmd := range c.commands {
				line := `"` + cmd.name + `") flags="`
				i := strings.Index(r.stdout, line)
				if i < 0 {
					t.Errorf("completion bash: no flags of %s", cmd.name)
					continue
				}
				flags := strings.Fields(r.stdout[i+len(line) : i+strings.Index(r.stdout[i:], "\" ;;")])
				cmd.flags.VisitAll(func(f *flag.Flag) {
					if !strings.Contains(" "+strings.Join(flags, " ")+" ", " --"+f.Name+" ") {
						t.Errorf("completion bash: %s's flags %q lack --%s", cmd.name, flags, f.Name)
					}
				})
			}
		}
		if sh, err := exec.LookPath(map[string]string{"bash": "bash", "zsh": "zsh", "fish": "fish"}[shell]); err == nil {
			script := filepath.Join(t.TempDir(), "mongolock."+shell)
			if err := os.WriteFile(script, []byte(r.stdout), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(sh, "-n", script).CombinedOutput(); err != nil {
				t.Errorf("%s -n: %v\n%s\n%s", shell, err, out, r.stdout)
			}
		} else {
			t.Logf("no %s here: its script is not checked by the shell", shell)
		}
	}
	r := invoke(t, "", "completion", "tcsh")
	requireCode(t, r, exitUsage, "completion tcsh")
}

// The bash script completes what the line asks for.
func TestBashCompletionCompletes(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash here")
	}
	r := invoke(t, "", "completion", "bash")
	requireCode(t, r, 0, "completion bash")
	script := filepath.Join(t.TempDir(), "mongolock.bash")
	if err := os.WriteFile(script, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	for line, want := range map[string]string{
		"mongolock ":                         "run acquire extend list inspect release completion help version",
		"mongolock li":                       "list",
		"mongolock --uri mongodb://x/db li":  "list",
		"mongolock run --tr":                 "--try",
		"mongolock list --wa":                "--watch",
		"mongolock --db ops release --fo":    "--force",
		"mongolock run --expiry ":            "",
		"mongolock help ins":                 "inspect",
		"mongolock completion f":             "fish",
		"mongolock run --expiry 1m x -- --t": "",
	} {
		words := strings.Fields(line)
		if strings.HasSuffix(line, " ") {
			words = append(words, "")
		}
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+w+"'")
		}
		prog := "source " + script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" + strconv.Itoa(len(words)-1) + "\n_mongolock\necho \"${COMPREPLY[*]}\"\n"
		var out bytes.Buffer
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c", prog)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Errorf("%q: %v\n%s", line, err, out.String())
			continue
		}
		if got := strings.TrimSpace(out.String()); got != want {
			t.Errorf("completing %q: %q, want %q", line, got, want)
		}
	}
}
