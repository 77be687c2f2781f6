//! What the criterion benches (`benches/benches/`) and the binaries
//! (`compare`, `orders`, `pair`, `medians`) share: one workload generator and
//! its probe streams, the peers filled with the same ranges, a
//! thread-CPU-time clock, and the description of the machine and build
//! printed beside every table.
//!
//! ```text
//! cargo bench -p latchtree-benches --bench lookup
//! cargo run --release -p latchtree-benches --bin compare -- --quick
//! ```

pub mod machine;
pub mod peers;
pub mod probes;
pub mod thread_cpu;
pub mod workload;
