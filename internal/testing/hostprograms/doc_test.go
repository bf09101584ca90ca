// Package hostprograms holds the test that keeps scripts/host-programs.tsv, the table of every program of the
// machine the project runs and the Debian package and script that bring it, true: a bare machine that ran
// make test-deps has everything make test runs.
package hostprograms
