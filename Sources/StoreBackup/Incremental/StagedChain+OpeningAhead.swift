extension StagedChain {
    /// The backups `newest`'s chain is expected to hold, by their names (an incremental's name
    /// says the date of its base, ``BackupName/base(of:among:)``), opened on every core at
    /// once where `destination` keeps them on this machine, with the password that opened
    /// `newest`. ``fetch(newest:destination:passwords:stage:streamFull:)`` must read each
    /// manifest before it knows the next base, so a chain of many points was opened one
    /// backup after the other. It takes a backup from here only when a manifest names it and
    /// it was opened at the path it stages; a name that lies costs an open, never a wrong link,
    /// and one that would not open here is opened there again (and its error reported).
    static func openAhead(
        from newest: ChainLink, among names: [String], destination: any BackupDestination
    ) async -> [String: ChainLink] {
        var expected: [(name: String, path: String)] = []
        var seen: Set<String> = [newest.name]
        var current = newest.name
        while expected.count + 1 < maxLength, let base = BackupName.base(of: current, among: names), seen.insert(base).inserted,
            let path = destination.localPath(of: base)
        {
            expected.append((base, path))
            current = base
        }
        // One base is opened by fetch as soon as it is needed; nothing to overlap.
        guard expected.count > 1 else { return [:] }
        let password = newest.reader.password, backups = expected
        let opened = try? await runBlocking(name: "storebackup-chain") { cancel in
            try WorkerPool.map(backups, name: "storebackup-chain-ahead", width: WorkerPool.cores, cancel: cancel) { backup in
                (try? ArchiveReader(path: backup.path, backupName: backup.name, passwords: password.map { .fixed($0) })).map {
                    ChainLink(name: backup.name, path: backup.path, downloaded: false, reader: $0)
                }
            }
        }
        var links: [String: ChainLink] = [:]
        for link in opened ?? [] { if let link { links[link.name] = link } }
        return links
    }
}
