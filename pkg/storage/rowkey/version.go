package rowkey

// Version orders the rows of one id: by _seq, then by the shard that wrote the row.
//
// _seq alone does not: it is unique within a shard (its writer's hybrid logical
// clock strictly increases, across epochs too), but two writers can issue the same
// _seq, when they write in the same millisecond or both count one above a causal
// token they observed. Without a second key the winner of such a tie depended on
// where each row was at the time (pending rows won ties over the base, a merge's
// rows over the rows it replaced), so a reader could see one row, then the other,
// as merges ran. (seq, shard) is unique per write, so every seal, merge and read
// picks the same winner whatever order the shards are merged in.
type Version struct {
	Seq uint64
	// Shard is the shard that wrote the row; "" for base rows committed before
	// fragments recorded their shard (FORMAT.md), which lose ties.
	Shard string
}

// Newer reports whether v wins over o: a higher _seq, or the same _seq from a
// shard whose name sorts after o's. Equal versions are the same write.
func (v Version) Newer(o Version) bool {
	if v.Seq != o.Seq {
		return v.Seq > o.Seq
	}
	return v.Shard > o.Shard
}
