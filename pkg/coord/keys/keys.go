// Package keys is Tidemark's etcd key schema: every key any process reads or writes
// is built here, under one prefix P (ETCD_PREFIX, default /tidemark), so the layout
// has one definition and an operator's `etcdctl get --prefix` matches the code.
//
//	P/tasks/<id>                 task record                                 package tasks
//	P/queue/<id>, P/running/<id> copies of the record acting as indexes      package tasks
//	P/claims/<id>                claim token, under the claimer's lease      package tasks
//	P/target-locks/<target>      claim token of the merge running on the     package tasks
//	                             target; its create revision is the fencing
//	                             token
//	P/maintenance-locks/<target> the same, of the maintenance task (compact,  package tasks
//	                             verify, repair) running on the target
//	P/dedupe/<kind>/<target>     id of the live task of that kind and target package tasks
//	P/cooldown/<kind>/<target>   {failures, until, last_error}               package tasks
//	P/coordination/<name>        holder name, under the holder's lease       package tasks
//	P/stats/<target>             stats row                                   package stats
//	P/workers/<instance>         worker record, under the worker's lease     package membership
//	P/pending/<instance>/<target> one store's pending generations in one     package pending
//	                             worker's shard, under the worker's lease
//	P/horizon/<target>/<shard>   a shard's change-feed promise {epoch,        package horizon
//	                             promise, open}; durable (no lease)
//	P/consumers/<target>/<consumer> a named consumer's committed feed       package consumers
//	                             cursor {cursor, committed_at}
//	P/health                     never written: the master's quorum read
//
// The package that writes a key owns its value; this one owns only the names.
//
// Invariant: every family prefix ends with a slash, so a prefix read of one family
// never reads another (P/tasks/ does not match P/tasks-old/).
package keys

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

// Schema is the key schema under one prefix P.
type Schema struct{ prefix string }

// Under is the schema under prefix (normalized by NormalizePrefix).
func Under(prefix string) Schema { return Schema{prefix: NormalizePrefix(prefix)} }

// Prefix is P, without a trailing slash.
func (k Schema) Prefix() string { return k.prefix }

// TasksPrefix is P/tasks/.
func (k Schema) TasksPrefix() string { return k.prefix + "/tasks/" }

// Task is P/tasks/<id>.
func (k Schema) Task(id string) string { return k.TasksPrefix() + id }

// QueuePrefix is P/queue/.
func (k Schema) QueuePrefix() string { return k.prefix + "/queue/" }

// Queue is P/queue/<id>.
func (k Schema) Queue(id string) string { return k.QueuePrefix() + id }

// RunningPrefix is P/running/.
func (k Schema) RunningPrefix() string { return k.prefix + "/running/" }

// Running is P/running/<id>.
func (k Schema) Running(id string) string { return k.RunningPrefix() + id }

// ClaimsPrefix is P/claims/.
func (k Schema) ClaimsPrefix() string { return k.prefix + "/claims/" }

// Claim is P/claims/<id>.
func (k Schema) Claim(id string) string { return k.ClaimsPrefix() + id }

// LocksPrefix is P/target-locks/.
func (k Schema) LocksPrefix() string { return k.prefix + "/target-locks/" }

// Lock is P/target-locks/<target>.
func (k Schema) Lock(target string) string { return k.LocksPrefix() + target }

// MaintenanceLocksPrefix is P/maintenance-locks/.
func (k Schema) MaintenanceLocksPrefix() string { return k.prefix + "/maintenance-locks/" }

// MaintenanceLock is P/maintenance-locks/<target>.
func (k Schema) MaintenanceLock(target string) string { return k.MaintenanceLocksPrefix() + target }

// DedupePrefix is P/dedupe/.
func (k Schema) DedupePrefix() string { return k.prefix + "/dedupe/" }

// Dedupe is P/dedupe/<kind>/<target>.
func (k Schema) Dedupe(kind, target string) string {
	return k.DedupePrefix() + kind + "/" + target
}

// CooldownPrefix is P/cooldown/.
func (k Schema) CooldownPrefix() string { return k.prefix + "/cooldown/" }

// Cooldown is P/cooldown/<kind>/<target>.
func (k Schema) Cooldown(kind, target string) string {
	return k.CooldownPrefix() + kind + "/" + target
}

// Coordination is P/coordination/<name>.
func (k Schema) Coordination(name string) string { return k.prefix + "/coordination/" + name }

// StatsPrefix is P/stats/.
func (k Schema) StatsPrefix() string { return k.prefix + "/stats/" }

// Stats is P/stats/<target>.
func (k Schema) Stats(target string) string { return k.StatsPrefix() + target }

// WorkersPrefix is P/workers/.
func (k Schema) WorkersPrefix() string { return k.prefix + "/workers/" }

// Worker is P/workers/<instance>.
func (k Schema) Worker(instanceID string) string { return k.WorkersPrefix() + instanceID }

// PendingPrefix is P/pending/.
func (k Schema) PendingPrefix() string { return k.prefix + "/pending/" }

// PendingOf is P/pending/<instance>/: every store's entry of one worker.
func (k Schema) PendingOf(instanceID string) string { return k.PendingPrefix() + instanceID + "/" }

// Pending is P/pending/<instance>/<target>.
func (k Schema) Pending(instanceID, target string) string { return k.PendingOf(instanceID) + target }

// HorizonPrefix is P/horizon/.
func (k Schema) HorizonPrefix() string { return k.prefix + "/horizon/" }

// HorizonOf is P/horizon/<target>/: the promises of every shard of a store.
func (k Schema) HorizonOf(target string) string { return k.HorizonPrefix() + target + "/" }

// Horizon is P/horizon/<target>/<shard>.
func (k Schema) Horizon(target, shard string) string { return k.HorizonOf(target) + shard }

// ConsumersPrefix is P/consumers/.
func (k Schema) ConsumersPrefix() string { return k.prefix + "/consumers/" }

// ConsumersOf is P/consumers/<target>/: every consumer of one store. Targets
// have no slash, so one store's consumers never match another's.
func (k Schema) ConsumersOf(target string) string { return k.ConsumersPrefix() + target + "/" }

// Consumer is P/consumers/<target>/<consumer>.
func (k Schema) Consumer(target, consumer string) string { return k.ConsumersOf(target) + consumer }

// Health is P/health.
func (k Schema) Health() string { return k.prefix + "/health" }
