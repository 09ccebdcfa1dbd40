"""Equal forms added to a graph before proving: each adds, beside a value, another spelling
of it that computes the same (a unit dim kept, a view chain in normal form, a chunk dim read
as a mesh axis), so the e-graph can meet the baseline's spelling. Nothing is removed."""
