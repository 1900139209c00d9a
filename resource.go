package converge

import "fmt"

// MaxResourceLen is the longest resource key.
const MaxResourceLen = 200

// ValidateResource checks a resource key: 1–200 characters of
// A-Z a-z 0-9 . _ : / @ -, starting with a letter or digit.
func ValidateResource(key string) error {
	if key == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(key) > MaxResourceLen {
		return fmt.Errorf("must be at most %d characters", MaxResourceLen)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i == 0 && !alnum {
			return fmt.Errorf("must start with a letter or digit")
		}
		if !alnum && c != '.' && c != '_' && c != ':' && c != '/' && c != '@' && c != '-' {
			return fmt.Errorf("may contain only A-Z a-z 0-9 . _ : / @ -")
		}
	}
	return nil
}

// MaxKindLen is the longest kind name.
const MaxKindLen = 63

// ValidateKind checks a kind name: 1–63 characters of a-z 0-9 _ -,
// starting with a letter. Configured kinds are named so, and so is every
// kind a filter may ask for.
func ValidateKind(name string) error {
	if name == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(name) > MaxKindLen {
		return fmt.Errorf("must be at most %d characters", MaxKindLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		lower := c >= 'a' && c <= 'z'
		if i == 0 && !lower {
			return fmt.Errorf("must start with a lowercase letter")
		}
		if !lower && !(c >= '0' && c <= '9') && c != '_' && c != '-' {
			return fmt.Errorf("may contain only a-z 0-9 _ -")
		}
	}
	return nil
}

// ValidateVersion checks a stream version: a positive integer (every
// int64 from 1 up; the API refuses 0 and negative versions).
func ValidateVersion(v int64) error {
	if v < 1 {
		return fmt.Errorf("must be a positive integer")
	}
	return nil
}
