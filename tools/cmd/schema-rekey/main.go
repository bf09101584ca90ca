// Command schema-rekey renames one provider in the output of `tofu providers schema -json` (or
// `terraform providers schema -json`). The CLI keys each provider by its full source address; tfplugindocs looks the
// provider up by the name it is given, so scripts/generate-docs.sh renames the key to the bare provider name.
//
//	go run ./cmd/schema-rekey -from registry.terraform.io/egress-proxies/egress -to egress < in.json > out.json
//
// Everything else in the document is passed through unchanged.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

func main() {
	from := flag.String("from", "", "provider address to rename (a key of provider_schemas)")
	to := flag.String("to", "", "new key")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, *from, *to); err != nil {
		fmt.Fprintln(os.Stderr, "schema-rekey:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer, from, to string) error {
	if from == "" || to == "" {
		return fmt.Errorf("-from and -to are required")
	}
	var doc map[string]json.RawMessage
	if err := json.NewDecoder(in).Decode(&doc); err != nil {
		return fmt.Errorf("reading the schema document: %w", err)
	}
	var providers map[string]json.RawMessage
	if raw, ok := doc["provider_schemas"]; ok {
		if err := json.Unmarshal(raw, &providers); err != nil {
			return fmt.Errorf("reading provider_schemas: %w", err)
		}
	}
	schema, ok := providers[from]
	if !ok {
		keys := make([]string, 0, len(providers))
		for k := range providers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return fmt.Errorf("provider_schemas has no %q (it has %q): does the configuration require that provider?", from, keys)
	}
	if _, clash := providers[to]; clash && to != from {
		return fmt.Errorf("provider_schemas already has %q", to)
	}
	delete(providers, from)
	providers[to] = schema
	raw, err := json.Marshal(providers)
	if err != nil {
		return err
	}
	doc["provider_schemas"] = raw
	enc := json.NewEncoder(out)
	return enc.Encode(doc)
}
