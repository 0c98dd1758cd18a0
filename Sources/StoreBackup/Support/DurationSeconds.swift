extension Duration {
    /// The duration in seconds, as reports and metrics give it.
    var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
