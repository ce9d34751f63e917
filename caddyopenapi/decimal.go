package caddyopenapi

import (
	"math/big"
	"math/bits"
)

// decimal is a JSON number as a decimal: (-1)^neg * mant * 10^exp, with
// mant free of trailing zeros (0 is mant 0, exp 0, not neg). Comparisons
// and multipleOf on decimals are exact and allocate nothing; a number of
// more than 19 significant digits does not fit (fits is false) and is
// computed as a big.Rat, as the JSON Schema library computes every
// number.
type decimal struct {
	mant uint64
	exp  int64
	neg  bool
	fits bool
}

// maxExp bounds exponents: a number written with a larger one saturates
// (it is beyond anything a schema can compare it with: a big.Rat does
// not take exponents of more than 10,000,000).
const maxExp = 1 << 40

// parseDecimal reads the text of a JSON number (already checked by the
// scanner, or by isJSONNumber).
func parseDecimal(b []byte) decimal {
	// most numbers have at most 19 digits and no exponent: the digits
	// make a uint64 as they come
	if len(b) > 0 && len(b) < 20 {
		i := 0
		neg := b[0] == '-'
		if neg {
			i++
		}
		var m uint64
		var frac int64
		point := false
		for ; i < len(b); i++ {
			c := b[i]
			if c == '.' && !point {
				point = true
				continue
			}
			if c < '0' || c > '9' {
				goto general
			}
			m = m*10 + uint64(c-'0')
			if point {
				frac++
			}
		}
		if m == 0 {
			return decimal{fits: true}
		}
		d := decimal{mant: m, exp: -frac, neg: neg, fits: true}
		for d.mant%10 == 0 {
			d.mant /= 10
			d.exp++
		}
		return d
	}
general:
	var d decimal
	i := 0
	if i < len(b) && b[i] == '-' {
		d.neg = true
		i++
	}
	d.fits = true
	var zeros int64 // zeros after the last nonzero digit, not yet in mant
	var frac int64  // digits after the point
	seen := false   // a nonzero digit
	point := false
	for ; i < len(b); i++ {
		c := b[i]
		if c == '.' {
			point = true
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		if point {
			frac++
		}
		if c == '0' {
			if seen {
				zeros++
			}
			continue
		}
		seen = true
		if d.fits {
			m, ok := mulPow10(d.mant, zeros)
			if ok {
				m, ok = addDigit(m, uint64(c-'0'))
			}
			if ok {
				d.mant = m
			} else {
				d.fits = false
			}
		}
		if !d.fits {
			// the digits are past what a uint64 holds: only the
			// exponent of the last nonzero digit is kept exactly
			d.mant = 0
		}
		zeros = 0
	}
	var e int64
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		for ; i < len(b); i++ {
			if e < maxExp {
				e = e*10 + int64(b[i]-'0')
			}
		}
		if e > maxExp {
			e = maxExp
		}
		if eneg {
			e = -e
		}
	}
	if !seen {
		return decimal{fits: true}
	}
	d.exp = e - frac + zeros
	return d
}

func mulPow10(m uint64, n int64) (uint64, bool) {
	for ; n > 0; n-- {
		hi, lo := bits.Mul64(m, 10)
		if hi != 0 {
			return 0, false
		}
		m = lo
	}
	return m, true
}

func addDigit(m, d uint64) (uint64, bool) {
	hi, lo := bits.Mul64(m, 10)
	if hi != 0 {
		return 0, false
	}
	s, carry := bits.Add64(lo, d, 0)
	return s, carry == 0
}

// isInt reports whether the number is an integer (1.0 and 1e2 are).
func (d decimal) isInt() bool { return d.mant == 0 && d.fits || d.exp >= 0 }

// digits is the number of decimal digits of m (m > 0).
func digits(m uint64) int64 {
	n := int64(1)
	for m >= 10 {
		m /= 10
		n++
	}
	return n
}

// cmpDec compares two decimals that fit: -1, 0 or 1.
func cmpDec(a, b decimal) int {
	switch {
	case a.mant == 0 && b.mant == 0:
		return 0
	case a.mant == 0:
		if b.neg {
			return 1
		}
		return -1
	case b.mant == 0:
		if a.neg {
			return -1
		}
		return 1
	case a.neg != b.neg:
		if a.neg {
			return -1
		}
		return 1
	}
	c := cmpMag(a, b)
	if a.neg {
		return -c
	}
	return c
}

// cmpMag compares the magnitudes of two nonzero decimals that fit.
func cmpMag(a, b decimal) int {
	da, db := digits(a.mant), digits(b.mant)
	if ea, eb := da+a.exp, db+b.exp; ea != eb {
		if ea < eb {
			return -1
		}
		return 1
	}
	// as many digits before the point: align the mantissas. A mantissa
	// has up to 20 digits, so the shorter one scaled up can pass what a
	// uint64 holds (2 against 18446744073709551615): it is then the
	// larger, as the other is a uint64.
	ma, mb := a.mant, b.mant
	if da < db {
		var ok bool
		if ma, ok = mulPow10(ma, db-da); !ok {
			return 1
		}
	} else if db < da {
		var ok bool
		if mb, ok = mulPow10(mb, da-db); !ok {
			return -1
		}
	}
	switch {
	case ma < mb:
		return -1
	case ma > mb:
		return 1
	}
	return 0
}

// multipleOf reports whether a is an integer multiple of m (m > 0), both
// fitting: a/m = A*10^(ea-em)/M.
func multipleOf(a, m decimal) bool {
	if a.mant == 0 {
		return true
	}
	d := a.exp - m.exp
	if d >= 0 {
		// M divides A*10^d
		return mulMod(a.mant%m.mant, powMod(10, d, m.mant), m.mant) == 0
	}
	// M*10^-d divides A (A < 10^20: a divisor past that is larger)
	if -d > 20 {
		return false
	}
	q, ok := mulPow10(m.mant, -d)
	if !ok {
		return false
	}
	return a.mant%q == 0
}

func mulMod(a, b, m uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	_, r := bits.Div64(hi%m, lo, m)
	return r
}

func powMod(b uint64, e int64, m uint64) uint64 {
	r := uint64(1) % m
	b %= m
	for e > 0 {
		if e&1 == 1 {
			r = mulMod(r, b, m)
		}
		b = mulMod(b, b, m)
		e >>= 1
	}
	return r
}

// decimalOfRat is a schema's bound as a decimal; fits is false when it
// is not a decimal of at most 19 significant digits.
func decimalOfRat(r *big.Rat) decimal {
	if r.Sign() == 0 {
		return decimal{fits: true}
	}
	num := new(big.Int).Abs(r.Num())
	den := new(big.Int).Set(r.Denom())
	// den = 2^a * 5^b: multiply by 10^max(a,b) / den
	two, five := big.NewInt(2), big.NewInt(5)
	var a, b int64
	mod := new(big.Int)
	for {
		q, m := new(big.Int).QuoRem(den, two, mod)
		if m.Sign() != 0 {
			break
		}
		den, a = q, a+1
	}
	for {
		q, m := new(big.Int).QuoRem(den, five, mod)
		if m.Sign() != 0 {
			break
		}
		den, b = q, b+1
	}
	if den.Cmp(big.NewInt(1)) != 0 {
		return decimal{}
	}
	k := max(a, b)
	num.Mul(num, new(big.Int).Exp(two, big.NewInt(k-a), nil))
	num.Mul(num, new(big.Int).Exp(five, big.NewInt(k-b), nil))
	exp := -k
	ten := big.NewInt(10)
	for {
		q, m := new(big.Int).QuoRem(num, ten, mod)
		if m.Sign() != 0 {
			break
		}
		num, exp = q, exp+1
	}
	if !num.IsUint64() {
		return decimal{}
	}
	return decimal{mant: num.Uint64(), exp: exp, neg: r.Sign() < 0, fits: true}
}

// ratOf is the number's text as a big.Rat (nil when big.Rat does not
// take it: an exponent past 10,000,000).
func ratOf(b []byte) *big.Rat {
	r, ok := new(big.Rat).SetString(string(b))
	if !ok {
		return nil
	}
	return r
}
