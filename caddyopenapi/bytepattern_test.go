package caddyopenapi

import (
	"regexp"
	"testing"
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
// only, leaves the others, and matches every text as regexp does.
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
			if got, want := bp.MatchString(s), re.MatchString(s); got != want {
				t.Errorf("%q on %q: %v, regexp %v", p, s, got, want)
			}
		}
	}
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
		if got, want := bp.MatchString(s), re.MatchString(s); got != want {
			t.Fatalf("%q on %q: %v, regexp %v", pattern, s, got, want)
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
