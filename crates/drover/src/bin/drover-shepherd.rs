//! The shepherd of one job as a program of its own (`drover_shepherd::run`), started for
//! every job: std and libc only, so that it starts in a fraction of the time the whole
//! `drover` program takes (`drover job-shepherd` does the same, slower).

fn main() {
    if std::env::args().nth(1).as_deref() == Some(drover_shepherd::SOURCE_ARGUMENT) {
        println!("{}", drover_shepherd::SOURCE);
        return;
    }
    std::process::exit(drover_shepherd::main());
}
