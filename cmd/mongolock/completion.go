package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

const completionHelp = `
Prints a script that completes mongolock's commands and flags in SHELL: bash, zsh or
fish. It is made from the command's own flags, so it names every one of this version.

Examples:
  source <(mongolock completion bash)            # in ~/.bashrc
  mongolock completion zsh > "${fpath[1]}/_mongolock"
  mongolock completion fish > ~/.config/fish/completions/mongolock.fish
`

// shells are the shells completion writes a script for.
var shells = map[string]func(c *cli, w io.Writer){
	"bash": (*cli).bashCompletion,
	"zsh":  (*cli).zshCompletion,
	"fish": (*cli).fishCompletion,
}

func (c *cli) completionCommand() *command {
	fs := flag.NewFlagSet("completion", flag.ContinueOnError)
	cmd := &command{name: "completion", synopsis: "completion bash|zsh|fish", help: completionHelp, flags: fs}
	cmd.run = func(args []string) error {
		pos, rest, err := c.parseArgs(cmd, args, 1)
		switch {
		case err != nil:
			return err
		case len(pos) == 0:
			return fail(exitUsage, "completion: which shell: bash, zsh or fish")
		case len(rest) > 0:
			return fail(exitUsage, "completion: one shell, not %q too", rest[0])
		case shells[pos[0]] == nil:
			return fail(exitUsage, "completion: %q: bash, zsh or fish", pos[0])
		}
		shells[pos[0]](c, c.stdout)
		return nil
	}
	return cmd
}

// words are what completes a command's line: the commands' names (and
// help's), and per command ("" for mongolock's own) its flags, and those
// of them that take a value.
func (c *cli) words() (names []string, flags, valued map[string][]string) {
	flags, valued = map[string][]string{}, map[string][]string{}
	add := func(cmd string, fs *flag.FlagSet) {
		fs.VisitAll(func(f *flag.Flag) {
			flags[cmd] = append(flags[cmd], "--"+f.Name)
			if !isBool(f) {
				valued[cmd] = append(valued[cmd], "--"+f.Name)
			}
		})
	}
	add("", c.global)
	for _, cmd := range c.commands {
		names = append(names, cmd.name)
		add(cmd.name, cmd.flags)
	}
	return append(names, "help", "version"), flags, valued
}

// bashCompletion writes a bash script: after mongolock, its flags or a
// command; after a command, its flags (after a flag that takes a value,
// or after run's --, bash's own completion); after help, a command; after
// completion, a shell.
func (c *cli) bashCompletion(w io.Writer) {
	names, flags, valued := c.words()
	var cases, values strings.Builder
	for _, cmd := range append([]string{""}, names...) {
		if fl, ok := flags[cmd]; ok {
			fmt.Fprintf(&cases, "        %q) flags=%q ;;\n", cmd, strings.Join(fl, " "))
		}
	}
	var all []string
	for _, v := range valued {
		all = append(all, v...)
	}
	slices.Sort(all)
	values.WriteString(strings.Join(slices.Compact(all), " "))
	fmt.Fprintf(w, `# bash completion for mongolock (mongolock completion bash)
_mongolock() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local valued=" %s "
    local cmd="" i word bare
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]} bare=${COMP_WORDS[i]#-}
        case $word in
        --) [[ $cmd == run ]] && return 0 ;;
        -*=*) ;;
        -*) [[ $valued == *" --${bare#-} "* ]] && ((i++)) ;;
        *) [[ -z $cmd ]] && cmd=$word ;;
        esac
    done
    bare=${prev#-}
    if [[ $prev == -* && $prev != *=* && $valued == *" --${bare#-} "* ]]; then
        return 0 # a flag's value: bash's own completion
    fi
    local flags=""
    case $cmd in
%s    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
        return 0
    fi
    case $cmd in
    "") COMPREPLY=($(compgen -W %q -- "$cur")) ;;
    help) COMPREPLY=($(compgen -W %q -- "$cur")) ;;
    completion) COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur")) ;;
    esac
    return 0
}
complete -o default -F _mongolock mongolock
`, values.String(), cases.String(), strings.Join(names, " "), strings.Join(c.commandNames(), " "))
}

// commandNames are the commands' names, as help takes them.
func (c *cli) commandNames() []string {
	var names []string
	for _, cmd := range c.commands {
		names = append(names, cmd.name)
	}
	return names
}

// zshCompletion writes a zsh script: bash's, through zsh's bashcompinit.
func (c *cli) zshCompletion(w io.Writer) {
	fmt.Fprint(w, "#compdef mongolock\n# zsh completion for mongolock (mongolock completion zsh), bash's through bashcompinit\nautoload -U +X bashcompinit && bashcompinit\n")
	c.bashCompletion(w)
}

// fishCompletion writes a fish script: the commands, with their
// synopses, then each one's flags, with their usage.
func (c *cli) fishCompletion(w io.Writer) {
	names, _, _ := c.words()
	fmt.Fprintf(w, "# fish completion for mongolock (mongolock completion fish)\ncomplete -c mongolock -f\n")
	fmt.Fprintf(w, "complete -c mongolock -n 'not __fish_seen_subcommand_from %s' -a 'help version'\n", strings.Join(names, " "))
	flagLines := func(cond string, fs *flag.FlagSet) {
		fs.VisitAll(func(f *flag.Flag) {
			_, usage := flag.UnquoteUsage(f)
			req := ""
			if !isBool(f) {
				req = " -r"
			}
			fmt.Fprintf(w, "complete -c mongolock -n %s -l %s%s -d %s\n", fishQuote(cond), f.Name, req, fishQuote(firstClause(usage)))
		})
	}
	flagLines("__fish_use_subcommand", c.global)
	for _, cmd := range c.commands {
		fmt.Fprintf(w, "complete -c mongolock -n __fish_use_subcommand -a %s -d %s\n", cmd.name, fishQuote(cmd.synopsis))
		flagLines("__fish_seen_subcommand_from "+cmd.name, cmd.flags)
	}
	fmt.Fprintf(w, "complete -c mongolock -n '__fish_seen_subcommand_from help' -a %s\n", fishQuote(strings.Join(c.commandNames(), " ")))
	fmt.Fprintf(w, "complete -c mongolock -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'\n")
}

// fishQuote quotes s for fish, in single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// firstClause is usage up to its first colon, semicolon or parenthesis:
// a description short enough for a menu.
func firstClause(usage string) string {
	if i := strings.IndexAny(usage, ":;("); i > 0 {
		usage = usage[:i]
	}
	return strings.TrimSpace(usage)
}
