package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestVersionPrintsBinaryNameAndVersion(t *testing.T) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasPrefix(got, "master ") || strings.TrimSpace(got) == "master" {
		t.Errorf("version printed %q, want \"master <version>\"", got)
	}
}
