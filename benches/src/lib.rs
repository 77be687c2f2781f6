//! What the criterion benches (`benches/benches/`) and the compare binary
//! (`src/bin/compare/`) share: one workload generator, the peers filled
//! with the same ranges, and a thread-CPU-time clock.
//!
//! ```text
//! cargo bench -p latchtree-benches --bench lookup
//! cargo run --release -p latchtree-benches --bin compare -- --quick
//! ```

pub mod peers;
pub mod thread_cpu;
pub mod workload;
