/// The library's version, written into every manifest.
package enum StoreBackupVersion {
    /// The version string, e.g. "0.2.0".
    package static let current = "0.2.0"
}
