package source

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/converge-run/converge"
)

// costLimit bounds the work of one expression's evaluation (CEL's cost
// units), so that a rule cannot be made to run long by a crafted body.
const costLimit = 1_000_000

// RuleError is a rule expression that does not compile or type-check,
// or (Rule is SourceField) a field of the source itself that is wrong,
// such as a Standard Webhooks secret that is not base64.
// Key names it in the configuration (sources.github.rules[0].when), so
// that config.Keyed turns it into the *config.KeyError start-up stops with.
type RuleError struct {
	Source string
	Rule   int
	Field  string
	Err    error
}

// SourceField is RuleError.Rule for a field of the source itself, not of
// one of its rules: its key is sources.<name>.<field>.
const SourceField = -1

// Key is the configuration key of the expression (sources.<name>.rules[N].<field>),
// or of the source's field (sources.<name>.<field>).
func (e *RuleError) Key() string {
	if e.Rule < 0 {
		return fmt.Sprintf("sources.%s.%s", e.Source, e.Field)
	}
	return fmt.Sprintf("sources.%s.rules[%d].%s", e.Source, e.Rule, e.Field)
}

// Message is what is wrong with it.
func (e *RuleError) Message() string { return e.Err.Error() }

func (e *RuleError) Error() string { return e.Key() + ": " + e.Err.Error() }

func (e *RuleError) Unwrap() error { return e.Err }

// rule is a compiled rule: when is nil when the rule always matches,
// version when it is auto, payload when it is omitted.
type rule struct {
	def                              converge.SourceRule
	when, resource, version, payload cel.Program
}

// celEnv is the environment every expression is compiled in: body (the
// parsed JSON, dyn) and headers (lower-case names).
func celEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("body", cel.DynType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
	)
}

// compileRule compiles and type-checks the expressions of one rule.
func compileRule(env *cel.Env, source string, i int, def converge.SourceRule) (*rule, error) {
	r := &rule{def: def}
	exprs := []struct {
		field string
		expr  string
		out   []*cel.Type
		prg   *cel.Program
	}{
		{"when", def.When, []*cel.Type{cel.BoolType}, &r.when},
		{"resource", def.Resource, []*cel.Type{cel.StringType}, &r.resource},
		{"version", def.Version, []*cel.Type{cel.IntType, cel.UintType, cel.DoubleType}, &r.version},
		{"payload", def.Payload, []*cel.Type{cel.MapType(cel.StringType, cel.DynType), cel.MapType(cel.DynType, cel.DynType)}, &r.payload},
	}
	for _, e := range exprs {
		if e.expr == "" || (e.field == "version" && e.expr == converge.VersionAuto) {
			continue
		}
		ast, iss := env.Compile(e.expr)
		if iss.Err() != nil {
			return nil, &RuleError{source, i, e.field, iss.Err()}
		}
		if !outputOK(ast.OutputType(), e.out) {
			return nil, &RuleError{source, i, e.field, fmt.Errorf("the expression is of type %s, not %s", ast.OutputType(), typeNames(e.out))}
		}
		prg, err := env.Program(ast, cel.CostLimit(costLimit))
		if err != nil {
			return nil, &RuleError{source, i, e.field, err}
		}
		*e.prg = prg
	}
	return r, nil
}

func outputOK(t *cel.Type, want []*cel.Type) bool {
	if t.IsExactType(cel.DynType) {
		return true
	}
	for _, w := range want {
		if t.IsAssignableType(w) || w.IsAssignableType(t) {
			return true
		}
	}
	return false
}

func typeNames(ts []*cel.Type) string {
	s := ""
	for i, t := range ts {
		if i > 0 {
			s += " or "
		}
		s += t.String()
	}
	return s
}

// Mapping is what a matching rule maps a delivery to. Version 0 is auto.
type Mapping struct {
	Rule     int
	Kind     string
	Workflow string
	Resource string
	Version  int64
	Payload  json.RawMessage
}

// mappingFailed is the 422 naming the rule and expression at fault.
func mappingFailed(i int, field, msg string) error {
	f := fmt.Sprintf("rules[%d].%s", i, field)
	return &converge.AppError{Code: converge.EMAPPINGFAILED, Message: f + ": " + msg,
		Fields: []converge.FieldError{{Field: f, Message: msg}}}
}

// eval evaluates rule i on vars: whether it matches and, if so, its
// mapping, or a mapping-failed error naming the rule.
func (r *rule) eval(i int, vars map[string]any) (*Mapping, error) {
	if r.when != nil {
		v, _, err := r.when.Eval(vars)
		if err != nil {
			return nil, mappingFailed(i, "when", err.Error())
		}
		b, ok := v.Value().(bool)
		if !ok {
			return nil, mappingFailed(i, "when", "is not a bool")
		}
		if !b {
			return nil, nil
		}
	}
	m := &Mapping{Rule: i, Kind: r.def.Kind, Workflow: r.def.Workflow, Payload: json.RawMessage(`{}`)}
	v, _, err := r.resource.Eval(vars)
	if err != nil {
		return nil, mappingFailed(i, "resource", err.Error())
	}
	res, ok := v.Value().(string)
	if !ok {
		return nil, mappingFailed(i, "resource", fmt.Sprintf("is a %s, not a string", v.Type().TypeName()))
	}
	if err := converge.ValidateResource(res); err != nil {
		return nil, mappingFailed(i, "resource", err.Error())
	}
	m.Resource = res
	if r.version != nil {
		v, _, err := r.version.Eval(vars)
		if err != nil {
			return nil, mappingFailed(i, "version", err.Error())
		}
		n, msg := positiveInt(v)
		if msg != "" {
			return nil, mappingFailed(i, "version", msg)
		}
		m.Version = n
	}
	if r.payload != nil {
		v, _, err := r.payload.Eval(vars)
		if err != nil {
			return nil, mappingFailed(i, "payload", err.Error())
		}
		p, err := toJSONObject(v)
		if err != nil {
			return nil, mappingFailed(i, "payload", err.Error())
		}
		// The API's limits on a submitted payload (SPEC §4) hold for
		// one a rule builds: a body's 1e300 is not stored as 301 digits.
		if msg := converge.CheckPayloadJSON(p); msg != "" {
			return nil, mappingFailed(i, "payload", msg)
		}
		m.Payload = p
	}
	return m, nil
}

// maxVersion is the largest version a rule may give: 2^53 - 1. CEL reads
// JSON numbers as doubles, which are exact integers up to 2^53 but cannot
// tell 2^53 from 2^53 + 1 (both read as 2^53): a version from 2^53 on,
// whether a double or an int converted from one by int(), may not be the
// number sent, and is refused rather than stored wrong.
const maxVersion = 1<<53 - 1

// positiveInt reads a version: a positive integer of at most maxVersion
// (an int, a uint, or a double with no fraction); otherwise a message why
// not.
func positiveInt(v ref.Val) (int64, string) {
	var n int64
	switch x := v.Value().(type) {
	case int64:
		n = x
	case uint64:
		if x > maxVersion {
			return 0, tooBig(v)
		}
		n = int64(x)
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) {
			return 0, fmt.Sprintf("%v is not a whole number", x)
		}
		if x > maxVersion {
			return 0, tooBig(v)
		}
		n = int64(x)
	default:
		return 0, fmt.Sprintf("is a %s, not a number", v.Type().TypeName())
	}
	if n > maxVersion {
		return 0, tooBig(v)
	}
	if n <= 0 {
		return 0, fmt.Sprintf("%v is not a positive integer", v.Value())
	}
	return n, ""
}

func tooBig(v ref.Val) string {
	return fmt.Sprintf("%v is over 2^53 - 1 (9007199254740991): CEL reads JSON numbers as doubles, which from 2^53 on may not be the number sent", v.Value())
}

var structType = reflect.TypeFor[*structpb.Struct]()

// toJSONObject converts a CEL map to a JSON object.
func toJSONObject(v ref.Val) (json.RawMessage, error) {
	if v.Type() != types.MapType {
		return nil, fmt.Errorf("is a %s, not a map", v.Type().TypeName())
	}
	n, err := v.ConvertToNative(structType)
	if err != nil {
		return nil, fmt.Errorf("is not a JSON object: %w", err)
	}
	b, err := protojson.Marshal(n.(*structpb.Struct))
	if err != nil {
		return nil, fmt.Errorf("is not a JSON object: %w", err)
	}
	return b, nil
}
