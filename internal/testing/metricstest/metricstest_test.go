package metricstest

import (
	"testing"
)

// TestParseText reads the exposition format as mtail and the exporter write it, and refuses what it cannot
// read instead of guessing.
func TestParseText(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		text    string
		drop    []string
		want    Samples
		wantErr bool
	}{
		"labels sorted, comments skipped": {
			text: "# HELP x y\n# TYPE x counter\nx{b=\"2\",a=\"1\"} 3\n",
			want: Samples{`x{a="1",b="2"}`: 3},
		},
		"no labels, a timestamp": {
			text: "up 1 1733373600000\n",
			want: Samples{"up": 1},
		},
		"escaped quote and comma in a value": {
			text: `x{a="q\"u,o"} 1` + "\n",
			want: Samples{`x{a="q\"u,o"}`: 1},
		},
		"dropped labels add up": {
			text: "x{prog=\"a\",d=\"1\"} 1\nx{prog=\"b\",d=\"1\"} 2\n",
			drop: []string{"prog"},
			want: Samples{`x{d="1"}`: 3},
		},
		"a value that is no number": {text: "x{a=\"1\"} many\n", wantErr: true},
		"an unterminated label":     {text: "x{a=\"1} 1\n", wantErr: true},
		"no value":                  {text: "x\n", wantErr: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseText(tt.text, tt.drop...)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("no error, got %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}
