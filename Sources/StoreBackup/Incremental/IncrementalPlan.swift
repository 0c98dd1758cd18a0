import Foundation

/// When a backup in a chain is a full one and when an incremental one (see
/// docs/incremental-backups.md).
public struct IncrementalPolicy: Sendable, Equatable {
    /// A full backup at least this often: a restore then never reads a chain older than this.
    public var fullEvery: TimeInterval = 7 * 86_400
    /// A full backup once the chain has this many incrementals.
    public var maxChainLength = 14
    /// A full backup when an incremental would hold more than this share of the store's
    /// bytes: it would save little, and lengthen the chain.
    public var maxDeltaShare = 0.5
    /// Make a full backup now (it starts a new chain).
    public var forceFull = false
    /// For ``BackupService``'s scheduled runs: a point at least this often even when the
    /// store's fingerprint says nothing changed (the safety net of the change detection,
    /// docs/incremental-backups.md); 0: a point at every run, as ``StoreHelper`` makes.
    public var fullScanEvery: TimeInterval = 3600
    /// For ``BackupService``'s points: the bytes of points kept beside the store while their
    /// destination cannot be reached (the spool, docs/incremental-backups.md); 0: none kept.
    public var spoolLimit: Int64 = 256 << 20

    /// A policy; each parameter sets the property of the same name, and the defaults are
    /// those the configuration file uses.
    public init(fullEvery: TimeInterval = 7 * 86_400, maxChainLength: Int = 14, maxDeltaShare: Double = 0.5, forceFull: Bool = false) {
        self.fullEvery = fullEvery
        self.maxChainLength = maxChainLength
        self.maxDeltaShare = maxDeltaShare
        self.forceFull = forceFull
    }
}

/// The decision made before the store is read: a full one (and why), or an incremental on
/// the state's last backup. The delta-share rule is applied after the scan.
enum IncrementalPlan {
    enum Decision: Sendable {
        case full(reason: String)
        case incremental(ChainState, files: [String: FileRecord], hasher: PageHasher)
    }

    /// - Parameters:
    ///   - loaded: The destination's chain state.
    ///   - password: The backup's password (nil: unencrypted).
    ///   - listing: The destination's backups, or nil when it cannot list.
    static func decide(
        policy: IncrementalPolicy, loaded: ChainFolder.Loaded, password: BackupPassword?, listing: [BackupListing]?,
        now: Date
    ) -> Decision {
        if policy.forceFull { return .full(reason: "a full backup was asked for") }
        guard case .state(let state, let files) = loaded else {
            if case .none(let reason) = loaded { return .full(reason: reason) }
            return .full(reason: "no chain state")
        }
        guard let listing else { return .full(reason: "the destination cannot list its backups, so the base cannot be checked") }
        guard listing.contains(where: { $0.name == state.backupName && $0.size == state.archiveSize }) else {
            return .full(reason: "the base \(state.backupName) is not at the destination (or its size changed)")
        }
        guard BackupName.makeIncremental(for: now, base: state.backupName) != nil else {
            return .full(reason: "the base's name \(state.backupName) carries no date an incremental's name can refer to")
        }
        if let broken = brokenChain(of: state, in: listing) { return .full(reason: broken) }
        guard !BackupNameDate.isTooFarAhead(state.backupName, of: now) else {
            return .full(
                reason:
                    "the base \(state.backupName) is named more than \(DurationText.format(BackupNameDate.maximumLead)) ahead of this machine's clock"
            )
        }
        guard state.encrypted == (password != nil) else {
            return .full(
                reason: state.encrypted ? "the chain was encrypted, this backup is not" : "this backup is encrypted, the chain was not")
        }
        guard state.chainLength + 1 <= policy.maxChainLength else {
            return .full(reason: "the chain holds \(state.chainLength) incrementals (at most \(policy.maxChainLength))")
        }
        guard now.timeIntervalSince(state.fullCreatedAt) < policy.fullEvery else {
            return .full(reason: "the chain's full backup is older than \(DurationText.format(policy.fullEvery)) (full-every)")
        }
        let hasher: PageHasher
        if let password {
            guard let salt = state.hashSalt.flatMap(FileDigest.bytes(hex:)), salt.count == 16 else {
                return .full(reason: "the chain state has no hash salt")
            }
            hasher = PageHasher.keyed(password: password, salt: salt)
            guard hasher.keyCheck == state.keyCheck else { return .full(reason: "the password differs from the chain's") }
        } else {
            hasher = .plain
        }
        return .incremental(state, files: files, hasher: hasher)
    }

    /// Why the chain of the state's last backup cannot be extended, read from the names at
    /// the destination (as `list` reads them): a base missing down to the full, a length
    /// other than the state's, or names that do not say one base for each link, in order.
    /// Nil when the chain is whole.
    static func brokenChain(of state: ChainState, in listing: [BackupListing]) -> String? {
        let chains = BackupChains(listing)
        if let missing = chains.missingBase(of: state.backupName) {
            return "the chain of \(state.backupName) is broken: its base of \(missing) is not at the destination"
        }
        let chain = chains.chain(of: state.backupName)
        for link in chain {
            guard let base = BackupName.baseDateText(of: link) else { continue }
            guard chains.bases(of: link).count == 1, let own = BackupName.ownDateText(of: link), base < own else {
                return
                    "the chain of \(state.backupName) cannot be read from the names at the destination (\(link) has no single earlier base)"
            }
        }
        guard chain.count == state.chainLength + 1, let full = chain.first, !BackupName.isIncremental(full) else {
            return
                "the chain of \(state.backupName) at the destination does not match the chain state (\(chain.count) backups, \(state.chainLength + 1) expected)"
        }
        return nil
    }
}
