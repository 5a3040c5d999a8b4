package tasks

import "strings"

// DefaultPrefix is the key prefix P when none is given (ETCD_PREFIX's default).
const DefaultPrefix = "/tidemark"

// NormalizePrefix is prefix without trailing slashes, DefaultPrefix when that
// leaves nothing.
func NormalizePrefix(prefix string) string {
	if prefix = strings.TrimRight(prefix, "/"); prefix == "" {
		return DefaultPrefix
	}
	return prefix
}

// Keys is the etcd key schema under one prefix P. Every Tidemark key is built
// here, so the layout has one definition; the package that writes a key owns its
// value:
//
//	P/tasks/<id>                 task record (this package)
//	P/queue/<id>, P/running/<id> copies of the record acting as indexes (this package)
//	P/claims/<id>                claim token, under the claimer's lease (this package)
//	P/target-locks/<target>      claim token; its create revision is the fencing token (this package)
//	P/dedupe/<kind>/<target>     id of the live task of that kind and target (this package)
//	P/cooldown/<kind>/<target>   {failures, until, last_error} (this package)
//	P/coordination/<name>        holder name, under the holder's lease (this package)
//	P/stats/<target>             stats row (package scanner)
//	P/workers/<instance>         worker record, under the worker's lease (package membership)
//	P/health                     never written: the master's quorum read
//
// A prefix ends with a slash, so a prefix read of one family never reads another
// (P/tasks/ does not match P/tasks-old/).
type Keys struct{ prefix string }

// KeysUnder is the schema under prefix (normalized by NormalizePrefix).
func KeysUnder(prefix string) Keys { return Keys{prefix: NormalizePrefix(prefix)} }

// Prefix is P, without a trailing slash.
func (k Keys) Prefix() string { return k.prefix }

// TasksPrefix is P/tasks/.
func (k Keys) TasksPrefix() string { return k.prefix + "/tasks/" }

// Task is P/tasks/<id>.
func (k Keys) Task(id string) string { return k.TasksPrefix() + id }

// QueuePrefix is P/queue/.
func (k Keys) QueuePrefix() string { return k.prefix + "/queue/" }

// Queue is P/queue/<id>.
func (k Keys) Queue(id string) string { return k.QueuePrefix() + id }

// RunningPrefix is P/running/.
func (k Keys) RunningPrefix() string { return k.prefix + "/running/" }

// Running is P/running/<id>.
func (k Keys) Running(id string) string { return k.RunningPrefix() + id }

// ClaimsPrefix is P/claims/.
func (k Keys) ClaimsPrefix() string { return k.prefix + "/claims/" }

// Claim is P/claims/<id>.
func (k Keys) Claim(id string) string { return k.ClaimsPrefix() + id }

// LocksPrefix is P/target-locks/.
func (k Keys) LocksPrefix() string { return k.prefix + "/target-locks/" }

// Lock is P/target-locks/<target>.
func (k Keys) Lock(target string) string { return k.LocksPrefix() + target }

// DedupePrefix is P/dedupe/.
func (k Keys) DedupePrefix() string { return k.prefix + "/dedupe/" }

// Dedupe is P/dedupe/<kind>/<target>.
func (k Keys) Dedupe(kind Kind, target string) string {
	return k.DedupePrefix() + string(kind) + "/" + target
}

// CooldownPrefix is P/cooldown/.
func (k Keys) CooldownPrefix() string { return k.prefix + "/cooldown/" }

// Cooldown is P/cooldown/<kind>/<target>.
func (k Keys) Cooldown(kind Kind, target string) string {
	return k.CooldownPrefix() + string(kind) + "/" + target
}

// Coordination is P/coordination/<name>.
func (k Keys) Coordination(name string) string { return k.prefix + "/coordination/" + name }

// StatsPrefix is P/stats/.
func (k Keys) StatsPrefix() string { return k.prefix + "/stats/" }

// WorkersPrefix is P/workers/.
func (k Keys) WorkersPrefix() string { return k.prefix + "/workers/" }

// Worker is P/workers/<instance>.
func (k Keys) Worker(instanceID string) string { return k.WorkersPrefix() + instanceID }

// Health is P/health.
func (k Keys) Health() string { return k.prefix + "/health" }
