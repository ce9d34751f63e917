package caddyopenapi

import (
	"fmt"
	"regexp"
	"testing"
	"unicode/utf8"
)

// bytePatternCases are patterns for the differential checks: ones the
// table takes (anchored or not, $ inside, alternation, bounded repeats,
// empty matches) and ones it must leave to the others.
var bytePatternCases = []string{
	"^[a-z_]+(,[a-z_]+)*$", "^ORD-[0-9]{6,10}$", "^[A-Z]{3}$", "^\\+[0-9]{7,15}$", "^[0-9A-Z -]{3,10}$",
	"^[a-z0-9-]{1,32}$", "^[a-z0-9-]+$", "^[A-Z]{3}-[0-9]+$", "^a", "b$", "^[a-z]*[0-9]?$", "^\\d{3}$", "^(ab)+$",
	"^[a-z]+[a-z0-9]$", "^[a-zA-Z_]\\w*$", "a|b", "^x?$", "^$", "$", "^", "", "ab", "a$b", "^a|b$", "(^a|b)c$",
	"^(a+b?)*$", "^((ab)*c)*$", "^(a?b)*$", "x*", "^x*$", "\\Aab\\z", "a+$", "^(?:a|ab)(?:c|bcd)$", "[0-9]{2}",
	"^[^a]+$", "^.{2,3}$", "^é+$", "(?i)^a+$", "\\bx", "(?m)^a$", "^\\S+$", "^[a-z]{0,200}$",
}

var bytePatternTexts = []string{
	"", "a", "b", "ab", "abc", "abcd", "ba", "x", "xx", "name,price", "name,", ",name", "name,,price", "na me",
	"ORD-123456", "ORD-12345", "ORD-12345678901", "EUR", "EURO", "eur", "+4912345678", "+49", "AB 12-C",
	"abc-12", "ABC-1é\xff", "é", "aé", "éa", "a\xff", "\xffb", "\xc3a", "\xe2\x28b", "a\nb", "a\x00", "abbcd",
	"abcd", "abc", "acd", "aabab", "123", "1234", "12x34", "x12", "_a1", "1a",
}

// TestBytePatterns: the table compiles the ASCII patterns with ^ and $
// only, leaves the others, and matches every text as regexp does; a
// pattern it says takes ASCII only matches no other text.
func TestBytePatterns(t *testing.T) {
	for p, want := range map[string]bool{
		"^[a-z_]+(,[a-z_]+)*$": true, "^ORD-[0-9]{6,10}$": true, "^\\+[0-9]{7,15}$": true, "a|b": true,
		"b$": true, "^(a+b?)*$": true, "\\Aab\\z": true, "^[a-z]{0,200}$": false, "^[^a]+$": false,
		"^.{2,3}$": false, "^é+$": false, "(?i)^a+$": false, "\\bx": false, "(?m)^a$": false, "^\\S+$": false,
	} {
		if got := newBytePattern(regexp.MustCompile(p)) != nil; got != want {
			t.Errorf("%s: table %v, want %v", p, got, want)
		}
	}
	for _, p := range bytePatternCases {
		re := regexp.MustCompile(p)
		bp := newBytePattern(re)
		if bp == nil {
			continue
		}
		for _, s := range bytePatternTexts {
			if msg := bytePatternDiffers(bp, re, s); msg != "" {
				t.Error(msg)
			}
		}
	}
	for p, want := range map[string]bool{
		"^[a-z_]+(,[a-z_]+)*$": true, "^ORD-[0-9]{6,10}$": true, "^$": true, "\\Aab\\z": true,
		"^a": false, "b$": false, "a|b": false, "x*": false, "^(a|b)": false,
	} {
		if got := newBytePattern(regexp.MustCompile(p)).asciiOnly; got != want {
			t.Errorf("%s: ASCII only %v, want %v", p, got, want)
		}
	}
}

// bytePatternDiffers says how the table and regexp disagree on s, or
// where the table says the pattern takes ASCII only and regexp matches
// other text; else "".
func bytePatternDiffers(bp *bytePattern, re *regexp.Regexp, s string) string {
	got, want := bp.MatchString(s), re.MatchString(s)
	if got != want {
		return fmt.Sprintf("%q on %q: %v, regexp %v", re, s, got, want)
	}
	if want && bp.asciiOnly {
		for i := 0; i < len(s); i++ {
			if s[i] >= utf8.RuneSelf {
				return fmt.Sprintf("%q matches %q, though it takes ASCII only", re, s)
			}
		}
	}
	return ""
}

// TestFastPatternBench: the bench document's patterns are tables.
func TestFastPatternBench(t *testing.T) {
	for _, p := range []string{"^[a-z_]+(,[a-z_]+)*$", "^ORD-[0-9]{6,10}$", "^[A-Z]{3}$", "^[a-z0-9-]{1,32}$"} {
		if _, ok := fastPattern(regexp.MustCompile(p)).(*bytePattern); !ok {
			t.Errorf("%s is not a table", p)
		}
	}
}

// FuzzBytePattern compares the table with regexp on the same text.
func FuzzBytePattern(f *testing.F) {
	for _, p := range append(bytePatternCases, fuzzPatterns...) {
		f.Add(p, "abc-12")
		f.Add(p, "ABC-1é\xff")
		f.Add(p, "name,price")
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		re, err := regexp.Compile(pattern)
		if err != nil {
			return
		}
		bp := newBytePattern(re)
		if bp == nil {
			return
		}
		if msg := bytePatternDiffers(bp, re, s); msg != "" {
			t.Fatal(msg)
		}
	})
}

func BenchmarkFieldsPattern(b *testing.B) {
	re := regexp.MustCompile("^[a-z_]+(,[a-z_]+)*$")
	for _, m := range []struct {
		name string
		re   interface{ MatchString(string) bool }
	}{{"table", newBytePattern(re)}, {"classes", newClassPattern(re)}} {
		b.Run(m.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if !m.re.MatchString("name,price") {
					b.Fatal("no match")
				}
			}
		})
	}
}
