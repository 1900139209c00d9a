package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/converge-run/converge"
)

// Duration is a time.Duration written in YAML as "1.5s", "200ms", "10m" or
// "30d" (days).
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler. A bad value is a
// *yaml.TypeError, like any other value of the wrong type, so that Parse
// can name its key.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := converge.ParseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{
			fmt.Sprintf("line %d: `%s` is not a duration (like 500ms, 30s, 5m, 30d)", n.Line, n.Value),
		}}
	}
	*d = Duration(v)
	return nil
}

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Config is the whole configuration.
type Config struct {
	Listen          string           `yaml:"listen"`
	DatabaseURL     string           `yaml:"database_url"`
	MaxPayloadBytes int64            `yaml:"max_payload_bytes"`
	RescueAfter     Duration         `yaml:"rescue_after"`
	ShutdownTimeout Duration         `yaml:"shutdown_timeout"`
	LogLevel        string           `yaml:"log_level"`
	RateLimit       RateLimit        `yaml:"rate_limit"`
	River           River            `yaml:"river"`
	Kinds           map[string]*Kind `yaml:"kinds"`
	// Workflows are named DAGs of steps (SPEC §10).
	Workflows map[string]*Workflow `yaml:"workflows"`
	// Sources are the event sources posting to /hooks/{name} (SPEC §12).
	Sources map[string]*Source `yaml:"sources"`
	// Notifications are the receivers of notifications (SPEC §12).
	Notifications []*Notification `yaml:"notifications"`
	// UI configures the dashboard.
	UI UI `yaml:"ui"`
	// RequestTimeout bounds every API request (SPEC §15, default 10s).
	RequestTimeout Duration `yaml:"request_timeout"`
	// Database is how converge reaches PostgreSQL: pooler, direct URL,
	// timeouts (SPEC §15).
	Database Database `yaml:"database"`
	// Retention says how long finished work is kept (SPEC §13).
	Retention Retention `yaml:"retention"`

	// AdminToken comes from CONVERGE_ADMIN_TOKEN only.
	AdminToken string `yaml:"-"`

	// given are the keys the parsed document sets (see givenKeys): only
	// an absent key's zero value is replaced by its default.
	given givenKeys
}

// UI configures the dashboard.
type UI struct {
	// BaseURL is the dashboard's address as its users reach it (the links
	// of notifications): http://<listen> when empty.
	BaseURL string `yaml:"base_url"`
	// TraceURL makes a run's trace id a link to a trace viewer: an http or
	// https URL template in which {trace_id} is replaced, such as
	// http://127.0.0.1:16686/trace/{trace_id} (Jaeger). Empty: the id is
	// shown without a link.
	TraceURL string `yaml:"trace_url"`
}

// Notification is one receiver of notifications as written in the
// configuration (SPEC §12): each notification of a type in On is posted
// to URL in Format (standard or slack), signed with the Standard Webhooks
// secret in the environment variable SecretEnv (when set), and tried
// MaxAttempts times Backoff apart (the kinds' defaults).
type Notification struct {
	URL         string   `yaml:"url"`
	SecretEnv   string   `yaml:"secret_env"`
	Format      string   `yaml:"format"`
	On          []string `yaml:"on"`
	MaxAttempts int      `yaml:"max_attempts"`
	Backoff     Backoff  `yaml:"backoff"`
	Timeout     Duration `yaml:"timeout"`

	// secret is the value of SecretEnv, read by Load.
	secret string
}

// Secret returns the value of the receiver's secret_env (after Load).
func (n *Notification) Secret() string { return n.secret }

// DashboardURL is the base URL of the dashboard's links: ui.base_url, or
// http://<listen> (a listen address without a host is on localhost).
func (c *Config) DashboardURL() string {
	if c.UI.BaseURL != "" {
		return strings.TrimRight(c.UI.BaseURL, "/")
	}
	addr := c.Listen
	if strings.HasPrefix(addr, ":") {
		addr = "localhost" + addr
	}
	return "http://" + addr
}

// RateLimit is the per-token request rate limit. Zero requests means off.
type RateLimit struct {
	Requests int      `yaml:"requests"`
	Window   Duration `yaml:"window"`
}

// River tunes the job queue.
type River struct {
	FetchCooldown     Duration `yaml:"fetch_cooldown"`
	FetchPollInterval Duration `yaml:"fetch_poll_interval"`
	PollOnly          bool     `yaml:"poll_only"`
}

// Kind is one kind of event: its target, retry policy and concurrency.
type Kind struct {
	Target      Target  `yaml:"target"`
	MaxAttempts int     `yaml:"max_attempts"`
	Backoff     Backoff `yaml:"backoff"`
	Concurrency int     `yaml:"concurrency"`
	// Debounce holds back the first attempt of every new run of the kind
	// (an event's from the API or a hook, a workflow step's) until this
	// long after its acceptance (SPEC §6), so that each newer version
	// arriving meanwhile supersedes the held one without a call and a
	// burst of versions costs the target one call, the last version's. A
	// burst is held back at most twenty debounces from its first version
	// (store.BurstMaxDebounces), so that versions that never stop coming
	// still reach the target. A version on a quiet stream waits it too. A
	// redrive's run and a run
	// released from hold (approval, quarantine) start at once: they are an
	// operator's single action, not a burst. Zero turns it off (every run
	// starts at once); nil means the default (200ms).
	Debounce *Duration `yaml:"debounce"`
	// QuarantineAfter quarantines a stream of the kind when this many of
	// its runs in a row ended failed: its new runs are held until an
	// operator releases it or a run succeeds (SPEC §11). Zero is off.
	QuarantineAfter int `yaml:"quarantine_after"`
}

// DebounceDelay returns Debounce (after Load: never nil).
func (k *Kind) DebounceDelay() time.Duration {
	if k.Debounce == nil {
		return DefaultDebounce
	}
	return k.Debounce.Std()
}

// Backoff is a kind's retry delay policy.
type Backoff struct {
	Initial Duration `yaml:"initial"`
	Max     Duration `yaml:"max"`
	// MaxRetryAfter is the longest Retry-After honoured (default 1h); a
	// longer one is cut to it (SPEC §6).
	MaxRetryAfter Duration `yaml:"max_retry_after"`
}

// Policy returns the backoff as the domain's rule.
func (b Backoff) Policy() converge.Backoff {
	return converge.Backoff{Initial: b.Initial.Std(), Max: b.Max.Std(), MaxRetryAfter: b.MaxRetryAfter.Std()}
}

// Target is where a kind's attempts go: exactly one of HTTP and Exec.
type Target struct {
	HTTP *HTTPTarget `yaml:"http"`
	Exec *ExecTarget `yaml:"exec"`
}

// HTTPTarget posts each attempt to URL.
type HTTPTarget struct {
	URL               string            `yaml:"url"`
	Timeout           Duration          `yaml:"timeout"`
	Headers           map[string]string `yaml:"headers"`
	TransientStatuses []int             `yaml:"transient_statuses"`
	PermanentStatuses []int             `yaml:"permanent_statuses"`
	// SigningSecretEnv names the environment variable holding the
	// Standard Webhooks secret (whsec_...) every call is signed with.
	SigningSecretEnv string `yaml:"signing_secret_env"`

	// signingSecret is the value of SigningSecretEnv, read by Load.
	signingSecret string
}

// SigningSecret returns the value of signing_secret_env (after Load), or
// "" when calls are not signed.
func (h *HTTPTarget) SigningSecret() string { return h.signingSecret }

// ExecTarget runs Command (an argv list, no shell) for each attempt.
type ExecTarget struct {
	Command            []string `yaml:"command"`
	Timeout            Duration `yaml:"timeout"`
	PermanentExitCodes []int    `yaml:"permanent_exit_codes"`
	Dir                string   `yaml:"dir"`
}

// Workflow is a named DAG of steps as written in the configuration.
type Workflow struct {
	Steps map[string]*WorkflowStep `yaml:"steps"`

	// order is the steps' names as written (Parse's recordStepOrder): the
	// order of steps that need none of each other.
	order []string
	// def is the checked, ordered workflow, set by Finish.
	def *converge.Workflow
}

// WorkflowStep is one step of a workflow: an event of kind Kind on the
// stream Resource resolves to, accepted once every step in Needs succeeded.
type WorkflowStep struct {
	Kind     string   `yaml:"kind"`
	Resource string   `yaml:"resource"`
	Needs    []string `yaml:"needs"`
	Approval bool     `yaml:"approval"`
}

// Source is an event source as written in the configuration: its type,
// the environment variable holding its secret, and its rules.
type Source struct {
	Type      string        `yaml:"type"`
	SecretEnv string        `yaml:"secret_env"`
	Rules     []*SourceRule `yaml:"rules"`
	// Auth is how deliveries are authenticated: signature (the default;
	// secret_env's secret) or token (cloudevents only: a bearer token of
	// role submitter, secret_env not needed).
	Auth string `yaml:"auth"`

	// secret is the value of SecretEnv, read by Load.
	secret string
}

// The ways a source's deliveries are authenticated (Source.Auth).
const (
	SourceAuthSignature = "signature"
	SourceAuthToken     = "token"
)

// SourceRule is one rule of a source: CEL expressions over body and
// headers, and the kind or workflow its matches start.
type SourceRule struct {
	When     string `yaml:"when"`
	Kind     string `yaml:"kind"`
	Workflow string `yaml:"workflow"`
	Resource string `yaml:"resource"`
	Version  string `yaml:"version"`
	Payload  string `yaml:"payload"`
}

// Defaults.
const (
	DefaultListen          = "127.0.0.1:8080"
	DefaultMaxPayloadBytes = 262144
	DefaultRescueAfter     = 2 * time.Minute
	DefaultMaxAttempts     = 10
	DefaultBackoffInitial  = time.Second
	DefaultBackoffMax      = 10 * time.Minute
	DefaultConcurrency     = 10
	DefaultDebounce        = 200 * time.Millisecond
	MaxDebounce            = 5 * time.Second
	DefaultHTTPTimeout     = 30 * time.Second
	DefaultExecTimeout     = 10 * time.Minute
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultNotificationTimeout bounds one call to a receiver of
	// notifications.
	DefaultNotificationTimeout = 10 * time.Second
	DefaultFetchCooldown       = 5 * time.Millisecond
	// DefaultFetchPoll bounds how late an attempt starts after its
	// backoff: River finds a snoozed job whose time has come only when it
	// polls (no notification is sent), so a long interval would stretch
	// the delays of SPEC §6 by up to that much.
	DefaultFetchPoll = 50 * time.Millisecond
)

// Default returns the configuration used without a file: kinds build and
// deploy posting to a local target on port 9000 (what `converge
// demo-target` serves).
func Default() *Config {
	return &Config{
		Kinds: map[string]*Kind{
			"build":  {Target: Target{HTTP: &HTTPTarget{URL: "http://127.0.0.1:9000/build"}}},
			"deploy": {Target: Target{HTTP: &HTTPTarget{URL: "http://127.0.0.1:9000/deploy"}}},
		},
	}
}

// Load reads the file at path (none when empty), applies the environment
// (DATABASE_URL, DATABASE_DIRECT_URL, CONVERGE_LISTEN, CONVERGE_ADMIN_TOKEN) and defaults, and
// validates the result. Every secret_env and signing_secret_env must name
// a variable that is set.
func Load(path string, getenv func(string) string) (*Config, error) {
	return load(path, getenv, Secrets{Sources: true, Calls: true})
}

// Secrets says which secrets a process needs, so which environment
// variables LoadSecrets requires: the sources' (secret_env) to check a
// delivery's signature, which only the API does, and the calls' (a
// target's signing_secret_env, a notification's secret_env) to sign
// what the workers send.
type Secrets struct {
	Sources bool
	Calls   bool
}

// LoadSecrets is Load reading only the secrets need names; the others are
// left empty, and their variables need not be set: a worker needs no
// webhook secret, an API process no signing secret.
func LoadSecrets(path string, getenv func(string) string, need Secrets) (*Config, error) {
	return load(path, getenv, need)
}

// LoadWithoutSecrets is Load for commands that serve no source, call no
// target and send no notification (migrate, token, prune): the secrets'
// variables need not be set (a migration job need not hold the webhook
// secrets), and the secrets are left empty.
func LoadWithoutSecrets(path string, getenv func(string) string) (*Config, error) {
	return load(path, getenv, Secrets{})
}

func load(path string, getenv func(string) string, secrets Secrets) (*Config, error) {
	cfg := Default()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read config: %w", err)
		}
		cfg, err = Parse(data)
		if err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	// fromEnv names the variable that set a key, for its error.
	fromEnv := map[string]string{}
	if v := getenv("DATABASE_URL"); v != "" {
		cfg.DatabaseURL, fromEnv["database_url"] = v, "DATABASE_URL"
	}
	if v := getenv("DATABASE_DIRECT_URL"); v != "" {
		cfg.Database.DirectURL, fromEnv["database.direct_url"] = v, "DATABASE_DIRECT_URL"
	}
	if v := getenv("CONVERGE_LISTEN"); v != "" {
		cfg.Listen, fromEnv["listen"] = v, "CONVERGE_LISTEN"
	}
	cfg.AdminToken = getenv("CONVERGE_ADMIN_TOKEN")
	if strings.ContainsFunc(cfg.AdminToken, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		// A bearer token is printable ASCII: this one could never sign in.
		return nil, &KeyError{"CONVERGE_ADMIN_TOKEN", "must be printable ASCII without spaces"}
	}
	if err := cfg.readSecrets(getenv, secrets); err != nil {
		return nil, err
	}
	if err := cfg.Finish(); err != nil {
		var ke *KeyError
		if errors.As(err, &ke) && fromEnv[ke.Key] != "" {
			ke.Message += " (set by " + fromEnv[ke.Key] + ")"
		}
		return nil, err
	}
	return cfg, nil
}

// readSecrets reads the secrets of sources, and the signing secrets of HTTP
// targets and notification receivers, from the environment variables their
// configuration names, those need asks for; a variable that is not set
// stops start-up naming the key.
func (c *Config) readSecrets(getenv func(string) string, need Secrets) error {
	for _, name := range c.SourceNames() {
		src := c.Sources[name]
		if !need.Sources || src == nil || src.SecretEnv == "" {
			continue // Finish names the missing key
		}
		src.secret = getenv(src.SecretEnv)
		if src.secret == "" {
			return &KeyError{"sources." + name + ".secret_env", fmt.Sprintf("the environment variable %s is not set", src.SecretEnv)}
		}
	}
	for _, name := range c.KindNames() {
		k := c.Kinds[name]
		if !need.Calls || k == nil || k.Target.HTTP == nil || k.Target.HTTP.SigningSecretEnv == "" {
			continue
		}
		h := k.Target.HTTP
		h.signingSecret = getenv(h.SigningSecretEnv)
		if h.signingSecret == "" {
			return &KeyError{"kinds." + name + ".target.http.signing_secret_env", fmt.Sprintf("the environment variable %s is not set", h.SigningSecretEnv)}
		}
	}
	for i, n := range c.Notifications {
		if !need.Calls || n == nil || n.SecretEnv == "" {
			continue
		}
		n.secret = getenv(n.SecretEnv)
		if n.secret == "" {
			return &KeyError{fmt.Sprintf("notifications[%d].secret_env", i), fmt.Sprintf("the environment variable %s is not set", n.SecretEnv)}
		}
	}
	return nil
}

// SetSigningSecret sets the signing secret of kind's HTTP target (what
// Load reads from its signing_secret_env), for a configuration built in
// code.
func (c *Config) SetSigningSecret(kind, secret string) {
	if k := c.Kinds[kind]; k != nil && k.Target.HTTP != nil {
		k.Target.HTTP.signingSecret = secret
	}
}

// SetSourceSecret sets the secret of source name (what Load reads from
// its secret_env), for a configuration built in code: converge dev's
// demo source and tests.
func (c *Config) SetSourceSecret(name, secret string) {
	if src := c.Sources[name]; src != nil {
		src.secret = secret
	}
}

// Keyed returns err as a *KeyError when it names a configuration key (a
// Key() string method, as the source package's rule errors have), and
// err unchanged otherwise: a CEL expression that does not compile stops
// start-up naming its rule (sources.github.rules[0].when).
func Keyed(err error) error {
	var ke interface {
		error
		Key() string
	}
	if err == nil || !errors.As(err, &ke) {
		return err
	}
	msg := ke.Error()
	if m, ok := ke.(interface{ Message() string }); ok {
		msg = m.Message()
	}
	return &KeyError{Key: ke.Key(), Message: msg}
}

// Parse decodes YAML strictly: an unknown key is an error. An unknown key
// or a value of the wrong type is a *KeyError naming its key.
func Parse(data []byte) (*Config, error) {
	cfg := &Config{}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("parse: %w", nameKey(&doc, err))
	}
	if err := checkWholeNumbers(&doc, reflect.TypeFor[Config](), ""); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if cfg.Kinds == nil {
		cfg.Kinds = Default().Kinds
	}
	cfg.given = givenKeys{}
	collectGiven(&doc, "", cfg.given)
	cfg.recordStepOrder(&doc)
	return cfg, nil
}

// recordStepOrder keeps, for each workflow of doc, its steps' names in the
// order they are written (keys merged in from an anchor first), which a
// decoded map loses.
func (c *Config) recordStepOrder(doc *yaml.Node) {
	walkKeys(doc, "", true, func(path string, _, _ *yaml.Node) bool {
		parts := strings.Split(path, ".")
		switch len(parts) {
		case 1:
			return parts[0] == "workflows"
		case 2:
			return true
		case 3:
			return parts[2] == "steps"
		case 4:
			if w := c.Workflows[parts[1]]; w != nil && !slices.Contains(w.order, parts[3]) {
				w.order = append(w.order, parts[3])
			}
		}
		return false
	})
}

// keyPos is a key of a YAML document: the line it is on, its dotted path,
// its own name and its value when that is a scalar.
type keyPos struct {
	line              int
	path, name, value string
}

// collectKeys lists the keys of the YAML node n, whose path is prefix, as
// written (aliases not followed), each with its line and its scalar value.
func collectKeys(n *yaml.Node, prefix string, out *[]keyPos) {
	walkKeys(n, prefix, false, func(path string, k, v *yaml.Node) bool {
		kp := keyPos{line: k.Line, path: path, name: k.Value}
		if v.Kind == yaml.ScalarNode {
			kp.value = v.Value
		}
		*out = append(*out, kp)
		return true
	})
}

var (
	lineMessage  = regexp.MustCompile(`^line (\d+): (.*)$`)
	unknownField = regexp.MustCompile(`^field (\S+) not found in type`)
	quotedValue  = regexp.MustCompile("`([^`]*)`")
)

// nameKey turns the first "line N: ..." message of a YAML decoding error into
// a *KeyError naming the key it is about, found among the keys on line N of
// doc by the field or the value the message quotes.
func nameKey(doc *yaml.Node, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return err
	}
	m := lineMessage.FindStringSubmatch(te.Errors[0])
	if m == nil {
		return err
	}
	line, _ := strconv.Atoi(m[1])
	var keys, onLine []keyPos
	collectKeys(doc, "", &keys)
	for _, k := range keys {
		if k.line == line {
			onLine = append(onLine, k)
		}
	}
	key := ""
	if f := unknownField.FindStringSubmatch(m[2]); f != nil {
		for _, k := range onLine {
			if k.name == f[1] {
				key = k.path
			}
		}
	} else if v := quotedValue.FindStringSubmatch(m[2]); v != nil {
		for _, k := range onLine {
			if k.value == v[1] {
				key = k.path
			}
		}
	}
	if key == "" && len(onLine) > 0 {
		key = onLine[len(onLine)-1].path
	}
	if key == "" {
		return err
	}
	msg := m[2]
	if secretKey(key) {
		// The value quoted is (a prefix of) a credential.
		msg = quotedValue.ReplaceAllString(msg, "`***`")
	}
	msg += " (line " + m[1] + ")"
	if n := len(te.Errors) - 1; n > 0 {
		// Their keys are not known here: none of their values is shown.
		rest := quotedValue.ReplaceAllString(strings.Join(te.Errors[1:], "; "), "`***`")
		msg += fmt.Sprintf(", and %d more error(s): %s", n, rest)
	}
	return &KeyError{Key: key, Message: msg}
}

// secretKey reports whether the value at key may be a credential, which an
// error message must not repeat: the database URL, target headers and
// the URLs of notification receivers.
func secretKey(key string) bool {
	return key == "database_url" || strings.HasPrefix(key, "database_url.") || key == "database.direct_url" || strings.Contains(key, ".headers") ||
		strings.HasPrefix(key, "notifications[") && strings.HasSuffix(key, ".url") // a chat webhook's URL is its credential
}

// KeyError is a configuration error at one key.
type KeyError struct {
	Key     string
	Message string
}

func (e *KeyError) Error() string { return "invalid configuration: " + e.Key + ": " + e.Message }

// Finish fills defaults and validates.
func (c *Config) Finish() error {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.MaxPayloadBytes == 0 && c.given.absent("max_payload_bytes") {
		c.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if c.MaxPayloadBytes <= 0 {
		return &KeyError{"max_payload_bytes", "must be positive"}
	}
	if c.RescueAfter == 0 && c.given.absent("rescue_after") {
		c.RescueAfter = Duration(DefaultRescueAfter)
	}
	if c.RescueAfter < Duration(100*time.Millisecond) {
		return &KeyError{"rescue_after", "must be at least 100ms"}
	}
	if c.ShutdownTimeout == 0 && c.given.absent("shutdown_timeout") {
		c.ShutdownTimeout = Duration(DefaultShutdownTimeout)
	}
	if c.ShutdownTimeout <= 0 {
		return &KeyError{"shutdown_timeout", "must be positive"}
	}
	switch c.LogLevel {
	case "":
		if !c.given.absent("log_level") {
			return &KeyError{"log_level", "must be one of debug, info, warn, error"}
		}
		c.LogLevel = "info"
	case "debug", "info", "warn", "error":
	default:
		return &KeyError{"log_level", "must be one of debug, info, warn, error"}
	}
	if c.RateLimit.Requests < 0 {
		return &KeyError{"rate_limit.requests", "must not be negative"}
	}
	if t := c.UI.TraceURL; t != "" {
		u, err := url.Parse(strings.ReplaceAll(t, "{trace_id}", "0"))
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || !strings.Contains(t, "{trace_id}") {
			return &KeyError{"ui.trace_url", "must be an absolute http or https URL containing {trace_id}, like http://127.0.0.1:16686/trace/{trace_id}"}
		}
	}
	if c.RateLimit.Requests > 0 && c.RateLimit.Window == 0 && c.given.absent("rate_limit.window") {
		c.RateLimit.Window = Duration(time.Second)
	}
	if c.RateLimit.Window < 0 || c.RateLimit.Requests > 0 && c.RateLimit.Window == 0 {
		// requests: 0 turns the limit off, whatever the window.
		return &KeyError{"rate_limit.window", "must be positive"}
	}
	if c.River.FetchCooldown == 0 && c.given.absent("river.fetch_cooldown") {
		c.River.FetchCooldown = Duration(DefaultFetchCooldown)
	}
	if c.River.FetchCooldown < Duration(time.Millisecond) {
		return &KeyError{"river.fetch_cooldown", "must be at least 1ms"}
	}
	if c.River.FetchPollInterval == 0 && c.given.absent("river.fetch_poll_interval") {
		c.River.FetchPollInterval = Duration(DefaultFetchPoll)
	}
	if c.River.FetchPollInterval < c.River.FetchCooldown {
		return &KeyError{"river.fetch_poll_interval", "must not be below river.fetch_cooldown"}
	}
	if c.DatabaseURL != "" {
		u, err := url.Parse(c.DatabaseURL)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return &KeyError{"database_url", "must be a postgres:// URL"}
		}
	}
	if err := c.finishDatabase(); err != nil {
		return err
	}
	if len(c.Kinds) == 0 {
		return &KeyError{"kinds", "at least one kind is required"}
	}
	for _, name := range c.KindNames() {
		if err := c.Kinds[name].finish("kinds."+name, name, c.given); err != nil {
			return err
		}
	}
	for _, name := range c.WorkflowNames() {
		if err := c.finishWorkflow(name); err != nil {
			return err
		}
	}
	for _, name := range c.SourceNames() {
		if err := c.finishSource(name); err != nil {
			return err
		}
	}
	if err := c.Retention.finish(); err != nil {
		return err
	}
	return c.finishNotifications()
}

// finishNotifications checks the receivers of notifications and the
// dashboard's base URL their links use.
func (c *Config) finishNotifications() error {
	if c.UI.BaseURL != "" {
		u, err := url.Parse(c.UI.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &KeyError{"ui.base_url", "must be an absolute http or https URL"}
		}
	}
	for i, n := range c.Notifications {
		key := fmt.Sprintf("notifications[%d]", i)
		if n == nil {
			return &KeyError{key, "must not be empty"}
		}
		u, err := url.Parse(n.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &KeyError{key + ".url", "must be an absolute http or https URL"}
		}
		switch n.Format {
		case "":
			if !c.given.absent(key + ".format") {
				return &KeyError{key + ".format", `must be standard or slack`}
			}
			n.Format = "standard"
		case "standard", "slack":
		default:
			return &KeyError{key + ".format", fmt.Sprintf("unknown format %q (standard or slack)", n.Format)}
		}
		if len(n.On) == 0 {
			return &KeyError{key + ".on", "list at least one of " + strings.Join(converge.NotificationTypes, ", ")}
		}
		for j, t := range n.On {
			if !slices.Contains(converge.NotificationTypes, t) {
				return &KeyError{fmt.Sprintf("%s.on[%d]", key, j), fmt.Sprintf("unknown notification type %q (%s)", t, strings.Join(converge.NotificationTypes, ", "))}
			}
		}
		if n.MaxAttempts == 0 && c.given.absent(key+".max_attempts") {
			n.MaxAttempts = DefaultMaxAttempts
		}
		if n.MaxAttempts < 1 || n.MaxAttempts > 1000 {
			return &KeyError{key + ".max_attempts", "must be between 1 and 1000"}
		}
		if n.Backoff.Initial == 0 && c.given.absent(key+".backoff.initial") {
			n.Backoff.Initial = Duration(DefaultBackoffInitial)
		}
		if n.Backoff.Max == 0 && c.given.absent(key+".backoff.max") {
			n.Backoff.Max = Duration(max(DefaultBackoffMax, n.Backoff.Initial.Std()))
		}
		if n.Backoff.Initial < Duration(time.Millisecond) {
			return &KeyError{key + ".backoff.initial", "must be at least 1ms"}
		}
		if n.Backoff.Max < n.Backoff.Initial {
			return &KeyError{key + ".backoff.max", "must not be below backoff.initial"}
		}
		if n.Timeout == 0 && c.given.absent(key+".timeout") {
			n.Timeout = Duration(DefaultNotificationTimeout)
		}
		if n.Timeout <= 0 {
			return &KeyError{key + ".timeout", "must be positive"}
		}
	}
	return nil
}

// SourceNames returns the configured sources, sorted.
func (c *Config) SourceNames() []string {
	names := make([]string, 0, len(c.Sources))
	for n := range c.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// finishSource checks source name: its type, secret and rules (the
// kinds and workflows they name; their CEL expressions are compiled by
// the source package, see Keyed).
func (c *Config) finishSource(name string) error {
	key := "sources." + name
	if converge.ValidateKind(name) != nil {
		return &KeyError{key, "a source name is 1-63 characters of a-z 0-9 _ -, starting with a letter"}
	}
	src := c.Sources[name]
	if src == nil {
		return &KeyError{key, "must not be empty"}
	}
	switch src.Type {
	case converge.SourceGitHub, converge.SourceCloudEvents, converge.SourceWebhook:
	case "":
		return &KeyError{key + ".type", "is required (github, cloudevents or webhook)"}
	default:
		return &KeyError{key + ".type", fmt.Sprintf("unknown type %q (github, cloudevents or webhook)", src.Type)}
	}
	switch src.Auth {
	case "", SourceAuthSignature:
		src.Auth = SourceAuthSignature
	case SourceAuthToken:
		if src.Type != converge.SourceCloudEvents {
			return &KeyError{key + ".auth", "token is for cloudevents sources only (github and webhook sources are signed)"}
		}
	default:
		return &KeyError{key + ".auth", fmt.Sprintf("unknown auth %q (signature or token)", src.Auth)}
	}
	if src.SecretEnv == "" && src.Auth == SourceAuthSignature {
		return &KeyError{key + ".secret_env", "is required: the environment variable holding the signing secret"}
	}
	for i, r := range src.Rules {
		rkey := fmt.Sprintf("%s.rules[%d]", key, i)
		if r == nil {
			return &KeyError{rkey, "must not be empty"}
		}
		switch {
		case (r.Kind == "") == (r.Workflow == ""):
			return &KeyError{rkey, "set exactly one of kind and workflow"}
		case r.Kind != "" && c.Kinds[r.Kind] == nil:
			return &KeyError{rkey + ".kind", fmt.Sprintf("unknown kind %q (configured: %s)", r.Kind, strings.Join(c.KindNames(), ", "))}
		case r.Workflow != "" && c.Workflows[r.Workflow] == nil:
			return &KeyError{rkey + ".workflow", fmt.Sprintf("unknown workflow %q (configured: %s)", r.Workflow, strings.Join(c.WorkflowNames(), ", "))}
		case r.Resource == "":
			return &KeyError{rkey + ".resource", "is required (a CEL expression)"}
		case r.Version == "":
			return &KeyError{rkey + ".version", "is required (a CEL expression or auto)"}
		}
	}
	return nil
}

// SourceDefs returns the configured sources with their secrets, sorted
// by name.
func (c *Config) SourceDefs() []converge.SourceDef {
	defs := make([]converge.SourceDef, 0, len(c.Sources))
	for _, name := range c.SourceNames() {
		src := c.Sources[name]
		d := converge.SourceDef{Name: name, Type: src.Type, Secret: src.secret, BearerToken: src.Auth == SourceAuthToken}
		for _, r := range src.Rules {
			d.Rules = append(d.Rules, converge.SourceRule{When: r.When, Kind: r.Kind, Workflow: r.Workflow,
				Resource: r.Resource, Version: r.Version, Payload: r.Payload})
		}
		defs = append(defs, d)
	}
	return defs
}

// WorkflowNames returns the configured workflows, sorted.
func (c *Config) WorkflowNames() []string {
	names := make([]string, 0, len(c.Workflows))
	for n := range c.Workflows {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// WorkflowDefs returns the checked workflows by name (after Finish).
func (c *Config) WorkflowDefs() map[string]*converge.Workflow {
	out := make(map[string]*converge.Workflow, len(c.Workflows))
	for n, w := range c.Workflows {
		out[n] = w.def
	}
	return out
}

// finishWorkflow checks workflow name: its name, each step's kind and the
// DAG (converge.NewWorkflow), naming the key at fault.
func (c *Config) finishWorkflow(name string) error {
	key := "workflows." + name
	if converge.ValidateKind(name) != nil {
		return &KeyError{key, "a workflow name is 1-63 characters of a-z 0-9 _ -, starting with a letter"}
	}
	w := c.Workflows[name]
	if w == nil {
		return &KeyError{key, "must not be empty"}
	}
	steps := make(map[string]*converge.WorkflowStep, len(w.Steps))
	stepNames := make([]string, 0, len(w.Steps))
	for n := range w.Steps {
		stepNames = append(stepNames, n)
	}
	sort.Strings(stepNames)
	for _, n := range stepNames {
		s := w.Steps[n]
		skey := key + ".steps." + n
		if converge.ValidateKind(n) != nil {
			return &KeyError{skey, "a step name is 1-63 characters of a-z 0-9 _ -, starting with a letter"}
		}
		if s == nil {
			return &KeyError{skey, "must not be empty"}
		}
		if s.Kind == "" {
			return &KeyError{skey + ".kind", "is required"}
		}
		if _, ok := c.Kinds[s.Kind]; !ok {
			return &KeyError{skey + ".kind", fmt.Sprintf("unknown kind %q (configured: %s)", s.Kind, strings.Join(c.KindNames(), ", "))}
		}
		steps[n] = &converge.WorkflowStep{Kind: s.Kind, Resource: s.Resource, Needs: s.Needs, Approval: s.Approval}
	}
	def, err := converge.NewWorkflowInOrder(name, w.order, steps)
	if err != nil {
		var we *converge.WorkflowError
		if errors.As(err, &we) {
			return &KeyError{key + "." + we.Key(), we.Message}
		}
		return &KeyError{key, err.Error()}
	}
	w.def = def
	return nil
}

// KindNames returns the configured kinds, sorted.
func (c *Config) KindNames() []string {
	names := make([]string, 0, len(c.Kinds))
	for n := range c.Kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// finish fills the defaults of the kind at key (named name) for the keys
// absent from given, and validates it.
func (k *Kind) finish(key, name string, given givenKeys) error {
	if converge.ValidateKind(name) != nil {
		return &KeyError{key, "a kind name is 1-63 characters of a-z 0-9 _ -, starting with a letter"}
	}
	if k == nil {
		return &KeyError{key, "must not be empty"}
	}
	if k.MaxAttempts == 0 && given.absent(key+".max_attempts") {
		k.MaxAttempts = DefaultMaxAttempts
	}
	if k.MaxAttempts < 1 || k.MaxAttempts > 1000 {
		return &KeyError{key + ".max_attempts", "must be between 1 and 1000"}
	}
	if k.QuarantineAfter < 0 || k.QuarantineAfter > 1000 {
		return &KeyError{key + ".quarantine_after", "must be between 0 (off) and 1000"}
	}
	if k.Backoff.Initial == 0 && given.absent(key+".backoff.initial") {
		k.Backoff.Initial = Duration(DefaultBackoffInitial)
	}
	if k.Backoff.Max == 0 && given.absent(key+".backoff.max") {
		k.Backoff.Max = Duration(max(DefaultBackoffMax, k.Backoff.Initial.Std()))
	}
	if k.Backoff.Initial < Duration(time.Millisecond) {
		return &KeyError{key + ".backoff.initial", "must be at least 1ms"}
	}
	if k.Backoff.Max < k.Backoff.Initial {
		return &KeyError{key + ".backoff.max", "must not be below backoff.initial"}
	}
	if k.Backoff.MaxRetryAfter == 0 && given.absent(key+".backoff.max_retry_after") {
		k.Backoff.MaxRetryAfter = Duration(converge.DefaultMaxRetryAfter)
	}
	if k.Backoff.MaxRetryAfter < Duration(time.Millisecond) {
		return &KeyError{key + ".backoff.max_retry_after", "must be at least 1ms"}
	}
	if k.Concurrency == 0 && given.absent(key+".concurrency") {
		k.Concurrency = DefaultConcurrency
	}
	if k.Debounce == nil {
		d := Duration(DefaultDebounce)
		k.Debounce = &d
	}
	if *k.Debounce < 0 || *k.Debounce > Duration(MaxDebounce) {
		return &KeyError{key + ".debounce", "must be between 0 (off) and 5s"}
	}
	if k.Concurrency < 1 || k.Concurrency > 10000 {
		return &KeyError{key + ".concurrency", "must be between 1 and 10000"}
	}
	t := &k.Target
	switch {
	case t.HTTP != nil && t.Exec != nil:
		return &KeyError{key + ".target", "set exactly one of http and exec"}
	case t.HTTP != nil:
		u, err := url.Parse(t.HTTP.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &KeyError{key + ".target.http.url", "must be an absolute http or https URL"}
		}
		if t.HTTP.Timeout == 0 && given.absent(key+".target.http.timeout") {
			t.HTTP.Timeout = Duration(DefaultHTTPTimeout)
		}
		if t.HTTP.Timeout <= 0 {
			return &KeyError{key + ".target.http.timeout", "must be positive"}
		}
		for _, list := range []struct {
			name  string
			codes []int
		}{{"transient_statuses", t.HTTP.TransientStatuses}, {"permanent_statuses", t.HTTP.PermanentStatuses}} {
			for _, c := range list.codes {
				if c < 100 || c > 599 {
					return &KeyError{key + ".target.http." + list.name, fmt.Sprintf("%d is not an HTTP status", c)}
				}
			}
		}
	case t.Exec != nil:
		if len(t.Exec.Command) == 0 || strings.TrimSpace(t.Exec.Command[0]) == "" {
			return &KeyError{key + ".target.exec.command", "must name a program"}
		}
		if t.Exec.Timeout == 0 && given.absent(key+".target.exec.timeout") {
			t.Exec.Timeout = Duration(DefaultExecTimeout)
		}
		if t.Exec.Timeout <= 0 {
			return &KeyError{key + ".target.exec.timeout", "must be positive"}
		}
		for _, c := range t.Exec.PermanentExitCodes {
			if c < 1 || c > 255 {
				return &KeyError{key + ".target.exec.permanent_exit_codes", fmt.Sprintf("%d is not an exit code from 1 to 255", c)}
			}
		}
	default:
		return &KeyError{key + ".target", "set one of http and exec"}
	}
	return nil
}

// KindPolicies returns the policy of every configured kind, built from
// Kinds (after Load or Finish): the one form of the kind policy that the
// API, the dashboard, the dead-letter redrives and the workers receive.
func (c *Config) KindPolicies() converge.KindPolicies {
	p := make(converge.KindPolicies, len(c.Kinds))
	for name, k := range c.Kinds {
		p[name] = k.Policy(name)
	}
	return p
}

// Policy returns the kind's policy under the name name.
func (k *Kind) Policy(name string) converge.KindPolicy {
	return converge.KindPolicy{
		Name: name, MaxAttempts: k.MaxAttempts, Backoff: k.Backoff.Policy(), Concurrency: k.Concurrency,
		Debounce: k.DebounceDelay(), Timeout: k.TargetTimeout(), QuarantineAfter: k.QuarantineAfter,
	}
}

// TargetTimeout returns how long one attempt of the kind may take.
func (k *Kind) TargetTimeout() time.Duration {
	if k.Target.HTTP != nil {
		return k.Target.HTTP.Timeout.Std()
	}
	return k.Target.Exec.Timeout.Std()
}
