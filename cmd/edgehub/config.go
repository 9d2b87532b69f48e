package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/alecthomas/kong"
	"go.yaml.in/yaml/v3"
)

// configFile is --config: a file of flag values, keyed by flag name. It
// loads the file before kong resolves the flags, whether the path came
// on the command line or from EDGEHUB_CONFIG.
type configFile string

// BeforeResolve adds the file's resolver. The path is read from the
// parse, not from the receiver: kong fills the field from the command
// line only after resolving.
func (configFile) BeforeResolve(ctx *kong.Context, trace *kong.Path) error {
	path, _ := ctx.FlagValue(trace.Flag).(configFile)
	if path == "" {
		return nil
	}
	r, err := loadConfig(string(path))
	if err != nil {
		return err
	}
	ctx.AddResolver(r)
	return nil
}

// loadConfig reads a JSON or YAML file, by its extension, with kong's
// JSON loader; YAML is turned into JSON first.
func loadConfig(path string) (*fileResolver, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
	case ".yaml", ".yml":
		var doc map[string]any
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("--config %s: %w", path, err)
		}
		if b, err = json.Marshal(doc); err != nil {
			return nil, fmt.Errorf("--config %s: %w", path, err)
		}
	default:
		return nil, fmt.Errorf("--config %s: the file's name must end in .json, .yaml or .yml", path)
	}
	var keys map[string]any
	if err := json.Unmarshal(b, &keys); err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	r, err := kong.JSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	return &fileResolver{Resolver: r, path: path, keys: keys}, nil
}

// holdsAdminKey reports whether the config file at path, which kong has
// read already, sets the admin key (admin_key, or adminKey).
func holdsAdminKey(path string) bool {
	r, err := loadConfig(path)
	if err != nil {
		return false
	}
	_, snake := r.keys["admin_key"]
	_, camelCase := r.keys[camel("admin-key")]
	return snake || camelCase
}

// fileResolver is kong's resolver of a config file with two changes: a
// flag whose EDGEHUB_ variable is set takes the variable, not the file
// (kong would let the file win), so that the order is flag, environment,
// file, default; and a key that names no flag of any command is an error,
// not a silent typo.
type fileResolver struct {
	kong.Resolver
	path string
	keys map[string]any
}

func (r *fileResolver) Resolve(ctx *kong.Context, parent *kong.Path, flag *kong.Flag) (any, error) {
	for _, env := range flag.Envs {
		if _, set := os.LookupEnv(env); set {
			return nil, nil
		}
	}
	v, err := r.Resolver.Resolve(ctx, parent, flag)
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", r.path, err)
	}
	return v, nil
}

// Validate accepts a key that names a flag of any command, so that one
// file can hold serve's flags and the client commands' (server, token,
// admin_key), in either of kong's spellings: max_body or maxBody.
func (r *fileResolver) Validate(app *kong.Application) error {
	known := map[string]bool{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			known[strings.ReplaceAll(f.Name, "-", "_")] = true
			known[camel(f.Name)] = true
		}
		for _, child := range n.Children {
			walk(child)
		}
	}
	walk(app.Node)
	var unknown []string
	for k := range r.keys {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("--config %s: %q is no flag of edgehub (keys are flag names such as max_body)", r.path, unknown)
	}
	return nil
}

// camel is kong's other spelling of a flag name: max-body is maxBody.
func camel(name string) string {
	parts := strings.Split(name, "-")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}
