package config

import (
	"reflect"
	"strings"
)

// Reloadable names the top-level keys a live reload (SIGHUP, POST
// /api/v1/admin/reload) puts in force without a restart; the sub-keys in
// NeedsRestart's exceptions are not. Everything else is read once at
// start: a change to it is reported by NeedsRestart and waits for one.
var Reloadable = []string{"upstreams", "auth", "admission", "prices", "quotas", "alerts", "notifiers"}

// notReloaded are the sub-keys of reloadable sections that are read at
// start all the same: the Redis connection of the quotas, the quota
// day's time zone, the alerting interval.
var notReloaded = map[string][]string{
	"quotas": {"redis", "timezone"},
	"alerts": {"interval"},
}

// NeedsRestart lists the YAML keys whose value differs between the
// running configuration and next and that a reload does not apply,
// e.g. "listen", "store", "quotas.redis"; empty when a reload applies
// every change.
func NeedsRestart(running, next *Config) []string {
	var out []string
	rv, nv := reflect.ValueOf(running).Elem(), reflect.ValueOf(next).Elem()
	t := rv.Type()
	for i := range t.NumField() {
		name := yamlName(t.Field(i))
		a, b := rv.Field(i), nv.Field(i)
		if !contains(Reloadable, name) {
			if !reflect.DeepEqual(a.Interface(), b.Interface()) {
				out = append(out, name)
			}
			continue
		}
		for _, sub := range notReloaded[name] {
			if !reflect.DeepEqual(subField(a, sub), subField(b, sub)) {
				out = append(out, name+"."+sub)
			}
		}
	}
	return out
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "" {
		return strings.ToLower(f.Name)
	}
	return name
}

// subField is the value of the field of struct v whose YAML name is key.
func subField(v reflect.Value, key string) any {
	for i := range v.NumField() {
		if yamlName(v.Type().Field(i)) == key {
			return v.Field(i).Interface()
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
