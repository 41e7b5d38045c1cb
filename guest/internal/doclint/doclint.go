// Package doclint holds no code: its test checks that every package of the
// guest module has a package doc comment and every exported identifier a
// doc comment (issue 20's shared decisions: Go follows STYLE.md's rule
// that every exported name says what it is, its units and errors).
package doclint
