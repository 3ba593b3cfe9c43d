package cli

import (
	"slices"

	"github.com/alecthomas/kong"
)

// JSONCommands lists the commands of the whole command line that have a
// --json flag, as "runs ls", read from its model: a flag added anywhere
// is listed.
func JSONCommands() ([]string, error) {
	parser, err := kong.New(&cli{}, helpVars)
	if err != nil {
		return nil, err
	}
	var out []string
	var walk func(*kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			if f.Name == "json" {
				out = append(out, n.Path())
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(parser.Model.Node)
	slices.Sort(out)
	return out, nil
}
