package main

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Names as the command prints and takes them. A lock's name is any
// string, so that the command can print every name in a form it takes
// back: a name that could be misread (empty, with spaces or characters
// that do not print, not UTF-8, or beginning with a quote or a dash) is
// printed quoted, as Go quotes a string; and a name argument that begins
// with a double quote is read as such a quoted string.

// printName is name as the command prints it: as it is, or quoted.
func printName(name string) string {
	if needsQuotes(name) {
		return strconv.Quote(name)
	}
	return name
}

// needsQuotes reports whether name, printed as it is, could be misread:
// taken for nothing, for two cells of a table, for a flag, or for a
// quoted name; or whether it does not print as itself.
func needsQuotes(name string) bool {
	return name == "" || !utf8.ValidString(name) || strings.HasPrefix(name, `"`) || strings.HasPrefix(name, "-") ||
		strings.ContainsFunc(name, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) })
}

// readName is the name that the argument arg gives: arg itself, or, if it
// begins with a double quote, the Go-quoted string it is.
func readName(cmd, arg string) (string, error) {
	if !strings.HasPrefix(arg, `"`) {
		return arg, nil
	}
	name, err := strconv.Unquote(arg)
	if err != nil {
		return "", fail(exitUsage, `%s: the name %s begins with a double quote but is not a quoted name as list prints one; a name that begins with a quote is given quoted: %s`, cmd, arg, strconv.Quote(arg))
	}
	return name, nil
}
