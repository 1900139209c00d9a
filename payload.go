package converge

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Payload limits (SPEC §4 "Limits on input"), held by every payload that
// is stored: one submitted to the API and one an event source's rule
// builds.
const (
	// MaxPayloadDepth is the deepest nesting of objects and arrays a
	// payload may have; the payload object itself is depth 1.
	MaxPayloadDepth = 64
	// MaxNumberChars is the longest plain decimal form (as PostgreSQL's
	// jsonb prints a number: no exponent) a payload number may have.
	MaxNumberChars = 64
	// numberGrowthSlack is how many bytes all of a payload's numbers
	// together may grow by, beyond the payload's own length, when printed
	// in plain decimal form: what is stored and returned stays within a
	// small factor of what was sent.
	numberGrowthSlack = 4096
)

// CheckPayloadJSON checks a payload that is already known to be one valid
// JSON value: nesting at most MaxPayloadDepth, every number finite with a
// plain decimal form of at most MaxNumberChars characters (and all of them
// together not growing the payload much), and every string storable by
// PostgreSQL's jsonb (no \u0000, no lone UTF-16 surrogate escape). It
// returns the problem as a message for the payload field, or "".
func CheckPayloadJSON(p []byte) string {
	depth, grown := 0, 0
	for i := 0; i < len(p); {
		switch c := p[i]; {
		case c == '{' || c == '[':
			depth++
			if depth > MaxPayloadDepth {
				return fmt.Sprintf("is nested deeper than %d levels of objects and arrays", MaxPayloadDepth)
			}
			i++
		case c == '}' || c == ']':
			depth--
			i++
		case c == '"':
			n, msg := ScanPayloadString(p[i:])
			if msg != "" {
				return msg
			}
			i += n
		case c == '-' || (c >= '0' && c <= '9'):
			j := i + 1
			for j < len(p) && isNumberByte(p[j]) {
				j++
			}
			plain, msg := plainNumberLen(p[i:j])
			if msg != "" {
				return msg
			}
			grown += max(0, plain-(j-i))
			if grown > len(p)+numberGrowthSlack {
				return fmt.Sprintf("has numbers whose plain decimal forms are together over %d bytes longer than the payload", len(p)+numberGrowthSlack)
			}
			i = j
		default:
			i++
		}
	}
	return ""
}

func isNumberByte(c byte) bool {
	return c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' || (c >= '0' && c <= '9')
}

// ScanPayloadString reads the JSON string at the start of p (its opening
// quote) and returns its length in bytes, or a message when PostgreSQL's
// jsonb could not store it (a \u0000 or lone UTF-16 surrogate escape).
func ScanPayloadString(p []byte) (int, string) { return scanJSONString(p, false) }

// HasLoneSurrogate reports whether JSON text p, already known to be valid
// JSON, has a string with a lone UTF-16 surrogate escape: a decoder puts
// U+FFFD in its place, so what it reads is not what was sent.
func HasLoneSurrogate(p []byte) bool {
	for i := 0; i < len(p); i++ {
		if p[i] != '"' {
			continue
		}
		n, msg := scanJSONString(p[i:], true)
		if msg != "" {
			return true
		}
		i += n - 1
	}
	return false
}

// scanJSONString is ScanPayloadString; a \u0000 escape is refused unless
// nulOK.
func scanJSONString(p []byte, nulOK bool) (int, string) {
	for i := 1; i < len(p); i++ {
		switch p[i] {
		case '"':
			return i + 1, ""
		case '\\':
			if i+1 < len(p) && p[i+1] == 'u' {
				r, ok := hex4(p[i+2:])
				switch {
				case !ok:
				case r == 0 && !nulOK:
					return 0, "must not contain the NUL character (\\u0000)"
				case r >= 0xD800 && r <= 0xDBFF:
					// A high surrogate must be followed by a low one.
					if len(p) < i+12 || p[i+6] != '\\' || p[i+7] != 'u' {
						return 0, "must not contain a lone UTF-16 surrogate escape"
					}
					if lo, ok := hex4(p[i+8:]); !ok || lo < 0xDC00 || lo > 0xDFFF {
						return 0, "must not contain a lone UTF-16 surrogate escape"
					}
					i += 6
				case r >= 0xDC00 && r <= 0xDFFF:
					return 0, "must not contain a lone UTF-16 surrogate escape"
				}
				i += 5
				continue
			}
			i++
		}
	}
	return len(p), ""
}

func hex4(p []byte) (rune, bool) {
	if len(p) < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(p[:4]), 16, 32)
	return rune(v), err == nil
}

// plainNumberLen returns the length of the plain decimal form PostgreSQL's
// numeric gives the JSON number n (no exponent: 1e3 is 1000, 1.50e-2 is
// 0.0150), or a message when that is over MaxNumberChars or the number is
// not a finite double.
func plainNumberLen(n []byte) (int, string) {
	tooLong := fmt.Sprintf("has a number (%s) whose plain decimal form is over %d characters", shorten(string(n), 32), MaxNumberChars)
	if _, err := strconv.ParseFloat(string(n), 64); err != nil {
		// A range error: beyond a double (non-finite), or so small that
		// its plain form is hundreds of zeros.
		return 0, tooLong
	}
	s := n
	sign := 0
	if len(s) > 0 && s[0] == '-' {
		sign, s = 1, s[1:]
	}
	mant, exp := s, int64(0)
	for k, c := range s {
		if c == 'e' || c == 'E' {
			mant = s[:k]
			e, err := strconv.ParseInt(string(s[k+1:]), 10, 64)
			if err != nil || e > 1<<20 || e < -(1<<20) {
				return 0, tooLong
			}
			exp = e
			break
		}
	}
	intPart, frac := mant, []byte(nil)
	for k, c := range mant {
		if c == '.' {
			intPart, frac = mant[:k], mant[k+1:]
			break
		}
	}
	// digits is every digit of the mantissa; point is where the decimal
	// point falls in it.
	digits := string(intPart) + string(frac)
	point := int64(len(intPart)) + exp
	scale := max(0, int64(len(frac))-exp)
	for len(digits) > 0 && digits[0] == '0' && point > 0 {
		digits, point = digits[1:], point-1
	}
	intChars := max(point, 1)
	total := int64(sign) + intChars
	if scale > 0 {
		total += 1 + scale
	}
	if total > MaxNumberChars {
		return 0, tooLong
	}
	return int(total), ""
}

// shorten cuts client input quoted in a message to at most n bytes, on a
// rune boundary, with invalid UTF-8 replaced.
func shorten(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
