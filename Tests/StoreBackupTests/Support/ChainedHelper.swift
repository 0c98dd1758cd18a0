import Foundation

@testable import StoreBackup

/// A store backed up in chains, as the tests of incrementals make one: the store's helper and
/// the create options that carry the chain policy.
struct ChainedHelper: Sendable {
    var helper: StoreHelper
    var options: CreateOptions

    init(_ helper: StoreHelper, policy: IncrementalPolicy = IncrementalPolicy(), encrypt: Bool = false) {
        self.helper = helper
        self.options = CreateOptions(encrypt: encrypt, incremental: policy)
    }

    var repository: BackupRepository { helper.repository }

    func createBackup() async throws -> BackupResult {
        try await helper.createBackup(options)
    }

    func createBackup(alsoTo mirrors: [any BackupDestination]) async throws -> [PublishOutcome] {
        try await helper.createBackup(options, alsoTo: mirrors)
    }
}
