package benchrun

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Env is the environment variable name, or def when it is unset or empty (${NAME:-def}). A
// subcommand's flag takes it as its default, so that a flag wins over the variable.
func Env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

var whole = regexp.MustCompile(`^[1-9][0-9]*$`)

// Whole parses setting name's value v, a whole number >= 1.
func Whole(name, v string) (int, error) {
	if !whole.MatchString(v) {
		return 0, fmt.Errorf("%s=%s: want a whole number >= 1", name, v)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%s: want a whole number >= 1", name, v)
	}
	return n, nil
}

// Instances parses an instances-per-service setting: 1 to 250 (the generators' limit).
func Instances(name, v string) (int, error) {
	n, err := Whole(name, v)
	if err != nil || n > 250 {
		return 0, fmt.Errorf("%s=%s: want 1 to 250", name, v)
	}
	return n, nil
}

// Words splits a setting on white space (read -r -a).
func Words(v string) []string { return strings.Fields(v) }

// OneOf fails unless v is one of allowed: "NAME=v: want a or b".
func OneOf(name, v string, allowed ...string) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	return fmt.Errorf("%s=%s: want %s", name, v, strings.Join(allowed, " or "))
}

var envWord = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// EnvWords checks that words are NAME=VALUE, as a process's added environment.
func EnvWords(name string, words []string) error {
	for _, w := range words {
		if !envWord.MatchString(w) {
			return fmt.Errorf("%s: %s: want NAME=VALUE words", name, w)
		}
	}
	return nil
}

// Setting declares the flag of environment variable env on fs: its name is env in lower case with
// "-" for "_" (SERVER_ENV: --server-env), its default the variable or else def (Env), so that a
// flag wins over the variable; its usage starts with the variable's name.
func Setting(fs *flag.FlagSet, env, def, usage string) *string {
	name := strings.ReplaceAll(strings.ToLower(env), "_", "-")
	return fs.String(name, Env(env, def), env+": "+usage)
}
