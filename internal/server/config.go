package server

import (
	"fmt"
	"net"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"sigs.k8s.io/yaml"
)

// envPrefix is the prefix of every environment variable a binary reads:
// --debounce-quiet is GALLEON_DEBOUNCE_QUIET.
const envPrefix = "GALLEON"

// EnvName returns the environment variable that sets a flag.
func EnvName(flag string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// loadSettings fills every flag not given on the command line from the
// environment or the config file, in that order (viper does the layering).
// Each value goes through the flag's own parser, so a bad value in any
// source fails the same way a bad flag does, naming where it came from.
func loadSettings(fs *pflag.FlagSet, configFile string) error {
	v := viper.New()
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(fs); err != nil {
		return err
	}
	fromFile := map[string]any{}
	if configFile != "" {
		raw, err := os.ReadFile(configFile)
		if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		if err := yaml.Unmarshal(raw, &fromFile); err != nil {
			return fmt.Errorf("config file %s: not valid YAML: %w", configFile, err)
		}
		var unknown []string
		for key := range fromFile {
			if fs.Lookup(key) == nil || key == "config" {
				unknown = append(unknown, key)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return fmt.Errorf("config file %s: unknown key(s) %s; the keys are the flag names: %s",
				configFile, strings.Join(unknown, ", "), strings.Join(flagNames(fs), ", "))
		}
		if err := v.MergeConfigMap(fromFile); err != nil {
			return fmt.Errorf("config file %s: %w", configFile, err)
		}
	}
	given := func(name string) bool {
		_, inEnv := os.LookupEnv(EnvName(name))
		_, inFile := fromFile[name]
		return inEnv || inFile
	}
	pairs := aliasPairs(fs)
	var errs []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "config" {
			return // the command line wins
		}
		if pair := pairs[f.Name]; pair != nil && (pair.Changed || given(pair.Name) && AliasOf(f) != "") {
			// One setting under two names: the command line wins whichever name it used, and
			// the current name wins over the deprecated one in the environment or file.
			return
		}
		if !given(f.Name) {
			return
		}
		env := EnvName(f.Name)
		source := "environment variable " + env
		if _, inEnv := os.LookupEnv(env); !inEnv {
			source = fmt.Sprintf("config file %s, key %q", configFile, f.Name)
		}
		value, err := flagString(v.Get(f.Name))
		if err == nil {
			err = fs.Set(f.Name, value)
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v (flag --%s: %s)", source, err, f.Name, f.Usage))
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// AliasAnnotation marks a deprecated flag that sets the same value as another: its one value
// is the other's name (daemon.DeprecatedFlag adds such flags).
const AliasAnnotation = "galleon.alias-of"

// AliasOf is the flag a deprecated alias f stands for, "" when f is none.
func AliasOf(f *pflag.Flag) string {
	if v := f.Annotations[AliasAnnotation]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// aliasPairs maps each flag that has a second name to the flag of that name: an alias to its
// current flag, and the current flag to its alias.
func aliasPairs(fs *pflag.FlagSet) map[string]*pflag.Flag {
	pairs := map[string]*pflag.Flag{}
	fs.VisitAll(func(alias *pflag.Flag) {
		if current := fs.Lookup(AliasOf(alias)); current != nil {
			pairs[alias.Name], pairs[current.Name] = current, alias
		}
	})
	return pairs
}

// deprecatedInUse lists the deprecated aliases that were set, on the command line or from
// the environment or config file, so the daemon can log each once.
func deprecatedInUse(fs *pflag.FlagSet) []*pflag.Flag {
	var used []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if AliasOf(f) != "" && f.Changed {
			used = append(used, f)
		}
	})
	return used
}

// flagString renders a value from the environment or YAML as the flag would
// be written on the command line.
func flagString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case []any:
		parts := make([]string, len(x))
		for i, p := range x {
			s, err := flagString(p)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case []string:
		return strings.Join(x, ","), nil
	case map[string]any, map[any]any:
		return "", fmt.Errorf("a map is not a valid value")
	case nil:
		return "", nil
	case float64:
		// YAML numbers arrive as float64; print integers without a decimal point.
		if x == float64(int64(x)) {
			return fmt.Sprintf("%d", int64(x)), nil
		}
		return fmt.Sprint(x), nil
	default:
		return fmt.Sprint(x), nil
	}
}

func flagNames(fs *pflag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name != "config" {
			names = append(names, f.Name)
		}
	})
	return names
}

// checkAddress rejects what net.Listen would reject, with the flag's name.
func checkAddress(flag, addr string) error {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return fmt.Errorf("--%s %q: want host:port, for example 127.0.0.1:16010 or :16010", flag, addr)
	}
	return nil
}

func oneOf(flag, value string, allowed ...string) error {
	if !slices.Contains(allowed, value) {
		return fmt.Errorf("--%s %q: want one of %s", flag, value, strings.Join(allowed, ", "))
	}
	return nil
}
