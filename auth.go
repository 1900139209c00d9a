package converge

// Role is what a token may do. Each role includes the ones before it.
type Role string

// Roles, weakest first.
const (
	RoleSubmitter Role = "submitter"
	RoleViewer    Role = "viewer"
	RoleOperator  Role = "operator"
)

func (r Role) rank() int {
	switch r {
	case RoleSubmitter:
		return 1
	case RoleViewer:
		return 2
	case RoleOperator:
		return 3
	}
	return 0
}

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r.rank() > 0 }

// Includes reports whether r may do what need may do.
func (r Role) Includes(need Role) bool { return r.rank() >= need.rank() && need.Valid() }
