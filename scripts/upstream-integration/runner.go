// Package runner stands in for envoyproxy/ratelimit's src/service_cmd/runner in its integration
// tests (copied into the fetched copy by scripts/upstream-integration.sh): instead of starting
// upstream's service in-process, it spawns sluice with the environment that would give upstream
// the test's settings, plus COMPAT_MODE=upstream, and reads statistics from sluice's /metrics
// under upstream's names (its default Prometheus mapping of its statsd names).
//
// The integration tests only use NewRunner, Run, Stop and GetStatsStore().{Flush, NewCounter,
// NewCounterWithTags, NewGauge}(...).Value(), so that is all this package offers.
package runner

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/envoyproxy/ratelimit/src/settings"
)

type process struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

type Runner struct {
	settings settings.Settings
	proc     *process
	stats    *Store
}

// The tests count hits against minute limits over some 40 calls and expect one window to hold
// them all. Upstream reads its statistics in-process in microseconds; here each read is a scrape,
// which stretches a test to several seconds, so a test is started only with at least this much of
// the minute left (otherwise a counter restarts mid-test, as upstream's would at the same time).
const minuteLeft = 25 * time.Second

func NewRunner(s settings.Settings) Runner {
	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < minuteLeft {
		time.Sleep(left + 100*time.Millisecond)
	}
	return Runner{
		settings: s,
		proc:     &process{done: make(chan struct{})},
		stats:    &Store{url: fmt.Sprintf("http://127.0.0.1:%d/metrics", s.Port)},
	}
}

// The variables whose values differ from upstream's defaults: what upstream would read to get s.
func Environment(s settings.Settings) []string {
	var defaults settings.Settings
	if err := envconfig.Process("UNLIKELY_PREFIX_", &defaults); err != nil {
		panic(err)
	}
	var env []string
	v, d := reflect.ValueOf(s), reflect.ValueOf(defaults)
	for i := 0; i < v.NumField(); i++ {
		name := v.Type().Field(i).Tag.Get("envconfig")
		if name == "" || reflect.DeepEqual(v.Field(i).Interface(), d.Field(i).Interface()) {
			continue
		}
		env = append(env, name+"="+format(v.Field(i)))
	}
	sort.Strings(env)
	return env
}

// As envconfig parses them: maps "k:v,k:v", slices "a,b", durations Go's way.
func format(f reflect.Value) string {
	switch x := f.Interface().(type) {
	case time.Duration:
		return x.String()
	case map[string]string:
		var parts []string
		for k, val := range x {
			parts = append(parts, k+":"+val)
		}
		sort.Strings(parts)
		return strings.Join(parts, ",")
	case []string:
		return strings.Join(x, ",")
	}
	return fmt.Sprint(f.Interface())
}

func (r *Runner) Run() {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "COMPAT_MODE=upstream"}
	env = append(env, Environment(r.settings)...)
	cmd := exec.Command(os.Getenv("SLUICE_NODE"), os.Getenv("SLUICE_MAIN"))
	cmd.Env = env
	if log, err := os.OpenFile(os.Getenv("SLUICE_LOG"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		fmt.Fprintf(log, "=== sluice started with: %s\n", strings.Join(env[2:], " "))
		cmd.Stdout, cmd.Stderr = log, log
		defer log.Close()
	}
	r.proc.mu.Lock()
	err := cmd.Start()
	if err == nil {
		r.proc.cmd = cmd
	}
	r.proc.mu.Unlock()
	if err != nil {
		fmt.Fprintf(os.Stderr, "could not start sluice: %v\n", err)
		close(r.proc.done)
		return
	}
	cmd.Wait()
	close(r.proc.done)
}

// SIGTERM, then waits until sluice has exited and its ports are closed, so that the next test's
// sluice is the one that answers.
func (r *Runner) Stop() {
	r.proc.mu.Lock()
	cmd := r.proc.cmd
	r.proc.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.proc.done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-r.proc.done
		}
	}
	for _, port := range []int{r.settings.GrpcPort, r.settings.Port, r.settings.DebugPort} {
		for i := 0; i < 100; i++ {
			conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 100*time.Millisecond)
			if err != nil {
				break
			}
			conn.Close()
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func (r *Runner) GetStatsStore() *Store { return r.stats }

// Every Value() scrapes sluice's /metrics: Flush has nothing to do.
type Store struct{ url string }

type Stat struct {
	store *Store
	name  string
	tags  map[string]string
}

func (s *Store) Flush()                      {}
func (s *Store) NewCounter(name string) Stat { return Stat{s, name, nil} }
func (s *Store) NewGauge(name string) Stat   { return Stat{s, name, nil} }
func (s *Store) NewCounterWithTags(name string, tags map[string]string) Stat {
	return Stat{s, name, tags}
}

var ruleStats = map[string]bool{"total_hits": true, "over_limit": true, "near_limit": true, "within_limit": true, "shadow_mode": true, "over_limit_with_local_cache": true}

// Upstream's default Prometheus mapping: ratelimit.service.rate_limit.<domain>.<key1>[.<key2>].<stat>
// → ratelimit_service_rate_limit_<stat>{domain,key1,key2}; any other name with '.' as '_'.
func series(name string, tags map[string]string) (string, map[string]string) {
	labels := map[string]string{}
	for k, v := range tags {
		labels[k] = v
	}
	parts := strings.Split(name, ".")
	if strings.HasPrefix(name, "ratelimit.service.rate_limit.") && len(parts) >= 6 && ruleStats[parts[len(parts)-1]] {
		labels["domain"], labels["key1"] = parts[3], parts[4]
		if len(parts) >= 7 {
			labels["key2"] = parts[5]
		} else {
			labels["key2"] = ""
		}
		return "ratelimit_service_rate_limit_" + parts[len(parts)-1], labels
	}
	return strings.ReplaceAll(name, ".", "_"), labels
}

// The series' value (0 when sluice does not have it, as a new gostats counter reads 0).
func (st Stat) Value() uint64 {
	want, labels := series(st.name, st.tags)
	resp, err := http.Get(st.store.url)
	if err != nil {
		fmt.Fprintf(os.Stderr, "scrape %s: %v\n", st.store.url, err)
		return 0
	}
	defer resp.Body.Close()
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, got, value, ok := parseSample(line)
		if !ok || name != want || !sameLabels(got, labels) {
			continue
		}
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0
		}
		return uint64(f)
	}
	return 0
}

// Labels absent from a series count as "".
func sameLabels(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok && v != "" {
			return false
		}
	}
	return true
}

func parseSample(line string) (string, map[string]string, string, bool) {
	labels := map[string]string{}
	brace := strings.IndexByte(line, '{')
	space := strings.LastIndexByte(line, ' ')
	if space < 0 {
		return "", nil, "", false
	}
	if brace < 0 || brace > space {
		return line[:strings.IndexByte(line, ' ')], labels, line[space+1:], true
	}
	end := strings.LastIndexByte(line, '}')
	for _, pair := range splitLabels(line[brace+1 : end]) {
		eq := strings.IndexByte(pair, '=')
		if eq < 0 {
			continue
		}
		v, err := strconv.Unquote(pair[eq+1:])
		if err != nil {
			v = strings.Trim(pair[eq+1:], `"`)
		}
		labels[pair[:eq]] = v
	}
	return line[:brace], labels, strings.TrimSpace(line[end+1:]), true
}

// Splits a="x",b="y" at commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}
