fn main() {
    std::process::exit(quarry::cli::main());
}
