package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// The wanted figures are what the scripts' awk (mawk 1.3.4) and bash printf printed for the same input.

func TestElapsed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		start, end string
		decimals   string // "" for awk's print format
		want       string
	}{
		{"nanoseconds, six digits", "1715000000.000000000", "1715000012.345678901", "", "12.3457"},
		{"a whole number prints as one", "1715000000.5", "1715000003.5", "", "3"},
		{"none", "1715000000.123456789", "1715000000.123456789", "", "0"},
		{"backwards", "1715000010", "1715000000", "", "-10"},
		{"large: %g's exponent", "0", "1234567.25", "", "1.23457e+06"},
		{"large and whole: an integer", "0", "1000000", "", "1000000"},
		{"beyond int32: %g again", "0", "2147483648", "", "2.14748e+09"},
		{"small: %g's exponent", "0", "0.000012345", "", "1.2345e-05"},
		{"the clock's double shows", "1715000000.9", "1715000001.0", "", "0.0999999"},
		{"one decimal", "1715000000.000000000", "1715000012.345678901", "1", "12.3"},
		{"one decimal, whole", "1715000000.5", "1715000003.5", "1", "3.0"},
		{"one decimal, an exact tie rounds to even", "0", "1234567.25", "1", "1234567.2"},
		{"one decimal, rounding up", "1715000000.9", "1715000001.0", "1", "0.1"},
		{"one decimal, backwards", "1715000010", "1715000000", "1", "-10.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"elapsed", tc.start, tc.end}
			if tc.decimals != "" {
				args = []string{"elapsed", "-decimals", tc.decimals, tc.start, tc.end}
			}
			var out bytes.Buffer
			if err := run(context.Background(), args, nil, &out); err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSuffix(out.String(), "\n"); got != tc.want {
				t.Errorf("elapsed %v = %q, want %q", args[1:], got, tc.want)
			}
		})
	}
}

func TestQuotient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b float64
		want string
	}{
		{3, 2, "1.50x"},
		{1, 3, "0.33x"},
		{0.125, 1, "0.12x"}, // an exact tie: to even, as C's printf
		{2, 0.016, "125.00x"},
		{10, 3, "3.33x"},
		{5, 0, "infx"},
		{-1, 4, "-0.25x"},
		{12.3457, 4.9, "2.52x"},
	}
	for _, tc := range tests {
		if got := quotient(tc.a, tc.b); got != tc.want {
			t.Errorf("quotient(%v, %v) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}

// bash's printf reads a long double: its rounding of a figure on a decimal tie is not a float64's.
func TestBashFixed(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"12.35", "12.4"}, // a float64 rounds it to 12.3
		{"12.25", "12.2"},
		{"0.05", "0.1"},
		{"0.15", "0.2"}, // a float64: 0.1
		{"0.45", "0.4"}, // a float64: 0.5
		{"99.95", "99.9"},
		{"1.23457e+06", "1234570.0"},
		{"7", "7.0"},
		{"12.3457", "12.3"},
		{"0.04999", "0.0"},
	}
	for _, tc := range tests {
		if got := bashFixed(tc.in, 1); got != tc.want {
			t.Errorf("bashFixed(%q, 1) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestAwkNumber(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   float64
		want string
	}{
		{2, "2"},
		{0.1 + 0.2, "0.3"},
		{1234567.5, "1.23457e+06"},
		{2147483647, "2147483647"},
		{-2147483648, "-2.14748e+09"},
		{1e15, "1e+15"},
		{-3, "-3"},
	}
	for _, tc := range tests {
		if got := awkNumber(tc.in); got != tc.want {
			t.Errorf("awkNumber(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  []string
		stdin string
		usage bool
	}{
		{"no subcommand", nil, "", true},
		{"unknown subcommand", []string{"ratio"}, "", true},
		{"elapsed wants two figures", []string{"elapsed", "1"}, "", true},
		{"elapsed of text", []string{"elapsed", "1", "soon"}, "", false},
		{"k8s-table without counts", []string{"k8s-table"}, "", true},
		{"a timing that is no number", []string{"k8s-table", "5"}, "egress-plan-5 fast\n", false},
		{"a timing line of three fields", []string{"k8s-table", "5"}, "egress-plan-5 1 2\n", false},
		{"egress always times every step", []string{"k8s-table", "5"}, "egress-plan-5 1\n", false},
		{"kvm-table without its heading", []string{"kvm-table"}, "", true},
		{"kvm-table without raw-create", []string{"kvm-table", "-proxies", "1", "-instance", "i", "-window", "0"},
			"raw-destroy 1\negress-plan-new 1\negress-apply 1\negress-plan 1\negress-destroy 1\n", false},
		{"an unknown flag", []string{"kvm-table", "-proxy", "1"}, "", true},
		{"namespace of another verb", []string{"namespace", "get", "-kubeconfig", "k", "ns"}, "", true},
		{"raw of another verb", []string{"raw", "apply", "-kubeconfig", "k", "-namespace", "ns", "-image", "i", "-proxies", "1"}, "", true},
		{"raw without -proxies", []string{"raw", "create", "-kubeconfig", "k", "-namespace", "ns", "-image", "i"}, "", true},
		{"objects without -image", []string{"objects", "-namespace", "ns"}, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := run(context.Background(), tc.args, strings.NewReader(tc.stdin), &bytes.Buffer{})
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, errUsage) != tc.usage {
				t.Errorf("error %q: a usage error %v, want %v", err, !tc.usage, tc.usage)
			}
		})
	}
}
