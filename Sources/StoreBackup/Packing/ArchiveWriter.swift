import CZip
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Writes a stores directory into a ZIP file with libzip: folders (empty ones too),
/// files, links and database snapshots, each with Unix mode and exact mtime, and the
/// manifest last, once every checksum is known.
struct ArchiveWriter {
    struct Settings {
        var compressionLevel: Int
        var workers: Int = WorkerPool.cores
        var sourcePath: String
        var hostName: String = FileSystem.hostName
        var createdAt: Date
        /// When set, every entry is encrypted with WinZip AES-256 under this password.
        var password: BackupPassword? = nil
        /// Set for a format-3 archive (a backup in an incremental chain); nil: format 2.
        var chain: ArchiveChainParts? = nil
        /// How many entries libzip holds at once (``SegmentedArchive``).
        var entriesPerSegment = ArchiveWriter.entriesPerSegment
        /// How the databases whose check passed are proven; nil: no proofs.
        var proofs: DatabaseProofSettings? = nil
        /// For an archive made from other backups' content instead of a scan (a merge of
        /// points): the manifest whose store fields it keeps, as their databases have no
        /// snapshot: the databases' rows (proofs too: they name the same bytes), the proof
        /// salt, and the stores directory's mode and time.
        var storeManifest: Manifest? = nil
    }

    /// About 2 MiB of libzip's entries at a time; a segment's close costs a read of its
    /// central directory, a few hundred kilobytes.
    static let entriesPerSegment = 4096

    let settings: Settings
    let cancel: CancellationFlag
    let progress: ProgressThrottle

    /// Writes `archivePath` (which must not exist). On any failure nothing is left there.
    /// `outsideLinks` and `leftOut` go into the manifest as they are (see ``Manifest``).
    /// `root` is the stores directory's mode and time as scanned (nil: read now).
    func write(
        items: [StoreItem], snapshots: [String: DatabaseSnapshot], outsideLinks: [String] = [], leftOut: [String] = [],
        root: (permissions: UInt32, modificationTime: Int64)? = nil, to archivePath: String
    ) throws -> Manifest {
        let output = try ArchiveOutputFile(path: archivePath)
        // Written back as it goes, so that the final fsync and the app's own wait for little.
        let writeback = WritebackPacer(descriptor: output.descriptor, boundInFlight: true)
        defer { writeback.stop() }
        output.wroteToFile = { writeback.wrote($0) }
        let segments = try SegmentedArchive(output: output, entriesPerSegment: settings.entriesPerSegment)

        let plan = planJobs(items: items, snapshots: snapshots)
        let totalBytes = plan.totalPlannedSize
        let counter = ByteCounter()
        let progress = self.progress
        let pipeline = CompressionPipeline(
            plan: plan, level: settings.compressionLevel, workers: settings.workers, cancel: cancel,
            password: settings.password
        ) { bytes, file in
            let done = counter.add(bytes)
            progress.report(BackupProgress(phase: .archiving, bytesDone: done, bytesTotal: totalBytes, currentFile: file))
        }
        defer { pipeline.stop() }
        let sources = PipelineEntrySources(pipeline: pipeline, password: settings.password)
        let contents = ItemContentSources(items: items)
        // Started first: the first segment is written before the last entry is added.
        pipeline.start()
        let cancel = self.cancel
        func closeSegment(_ archive: OpaquePointer) throws {
            guard zip_close(archive) == 0 else {
                if cancel.isCancelled { throw StoreBackupError.cancelled }
                throw libzipError(archive, "write")
            }
        }

        // Names are the path's raw bytes; ZIP_FL_ENC_GUESS keeps bytes that are not UTF-8 as they
        // are (libzip marks UTF-8 names as such and leaves the others unmarked).
        let nameFlags = zip_flags_t(ZIP_FL_ENC_GUESS)
        for (itemIndex, item) in items.enumerated() {
            let archive = segments.handle
            let index: Int64
            let name = ArchiveNames.entryName(for: item.relativePath)
            switch item.kind {
            case .directory:
                index = zip_dir_add(archive, name, nameFlags)
                guard index >= 0 else { throw libzipError(archive, "add folder \(item.relativePath)") }
                try setAttributes(archive, index, type: UnixMode.directory, item: item)
            case .file, .database:
                // In an incremental, an unchanged file or a page-patched database has no entry.
                guard let jobIndex = plan.job(ofItem: itemIndex) else { continue }
                index = try addPipelineEntry(archive, name: name, jobIndex: jobIndex, plan: plan, sources: sources)
                try setAttributes(archive, index, type: UnixMode.regular, item: item)
            case .symlink:
                let source = try contents.makeSource(in: archive, item: itemIndex)
                index = zip_file_add(archive, name, source, nameFlags)
                guard index >= 0 else {
                    zip_source_free(source)
                    throw libzipError(archive, "add link \(item.relativePath)")
                }
                zip_set_file_compression(archive, zip_uint64_t(index), ZIP_CM_STORE, 0)
                try encryptSmallEntry(archive, index, what: item.relativePath)
                try setAttributes(archive, index, type: UnixMode.symlink, item: item)
            case .fifo:
                // An empty entry whose mode says FIFO: restore makes it with mkfifo.
                let source = try contents.makeSource(in: archive, item: itemIndex)
                index = zip_file_add(archive, name, source, nameFlags)
                guard index >= 0 else {
                    zip_source_free(source)
                    throw libzipError(archive, "add FIFO \(item.relativePath)")
                }
                zip_set_file_compression(archive, zip_uint64_t(index), ZIP_CM_STORE, 0)
                try encryptSmallEntry(archive, index, what: item.relativePath)
                try setAttributes(archive, index, type: UnixMode.fifo, item: item)
            }
            try segments.entryAdded(close: closeSegment)
        }

        // The extras' jobs come after the store's.
        let storeJobCount = plan.jobs.count - plan.extras.count
        for (number, extra) in (settings.chain?.extraEntries ?? []).enumerated() {
            let jobIndex = storeJobCount + number
            let archive = segments.handle
            let index = try addPipelineEntry(
                archive, name: extra.name.map { CChar(bitPattern: $0) } + [0], jobIndex: jobIndex, plan: plan, sources: sources)
            try setAttributes(archive, index, type: UnixMode.regular, item: plan.item(ofJob: jobIndex))
            try segments.entryAdded(close: closeSegment)
        }

        // The marker and the manifest share the last segment (the manifest is the last entry).
        let archive = segments.handle

        let format = archiveFormat(plan)
        let markerText = Data(ArchiveNames.markerText(format: format).utf8)
        let markerName = ArchiveNames.marker(format: format)
        let markerSource = try LazyDataSource(modificationTime: Int64(settings.createdAt.timeIntervalSince1970)) { markerText }
            .makeSource(in: archive)
        let markerIndex = zip_file_add(archive, markerName, markerSource, zip_flags_t(ZIP_FL_ENC_UTF_8))
        guard markerIndex >= 0 else {
            zip_source_free(markerSource)
            throw libzipError(archive, "add the format marker")
        }
        zip_file_set_external_attributes(archive, zip_uint64_t(markerIndex), 0, UInt8(ZIP_OPSYS_UNIX), (UnixMode.regular | 0o644) << 16)
        try encryptSmallEntry(archive, markerIndex, what: "the format marker")

        var head: Manifest?
        let manifestSource = try ManifestEntrySource(modificationTime: Int64(settings.createdAt.timeIntervalSince1970)) {
            // Every file's data is written by now (the manifest is the last entry).
            pipeline.releaseBuffers()
            var made = try manifestHead(
                items: items, plan: plan, snapshots: snapshots, pipeline: pipeline, outsideLinks: outsideLinks,
                leftOut: leftOut, root: root)
            made.format = format
            head = made
            // The rows are made as they are written: libzip's entries are all alive now.
            return ManifestWriter(made, rowCount: items.count) { index in
                manifestRow(ofItem: index, items: items, plan: plan, pipeline: pipeline)
            }
        }.makeSource(in: archive)
        let manifestIndex = zip_file_add(archive, Manifest.archivePath, manifestSource, zip_flags_t(ZIP_FL_ENC_UTF_8))
        guard manifestIndex >= 0 else {
            zip_source_free(manifestSource)
            throw libzipError(archive, "add manifest")
        }
        zip_file_set_external_attributes(archive, zip_uint64_t(manifestIndex), 0, UInt8(ZIP_OPSYS_UNIX), (UnixMode.regular | 0o644) << 16)
        try encryptSmallEntry(archive, manifestIndex, what: "the manifest")
        // A marker that tools (and `zipinfo`) can see without the password.
        try segments.finish(comment: settings.password == nil ? nil : Self.encryptedComment, close: closeSegment)
        guard var manifest = head else { throw StoreBackupError.archiveWrite(reason: "manifest was not written") }
        // Made again for the caller now that libzip's entries are freed: the same rows.
        var files: [Manifest.File] = []
        files.reserveCapacity(items.count)
        for index in items.indices {
            files.append(manifestRow(ofItem: index, items: items, plan: plan, pipeline: pipeline))
        }
        manifest.files = files
        progress.report(BackupProgress(phase: .archiving, bytesDone: totalBytes, bytesTotal: totalBytes), force: true)
        return manifest
    }

    /// The lowest format whose features the archive uses (docs/FORMAT.md §10): 4 when an
    /// entry is deflated in more than one block (its block list comes with block hashes),
    /// else 3 for a backup of a chain and 2 for a plain one.
    private func archiveFormat(_ plan: CompressionPlan) -> Int {
        let hasBlockList = plan.jobs.contains { $0.method != .store && $0.plannedSize > Int64(CompressionPipeline.blockSize) }
        if hasBlockList { return ArchiveNames.blockHashFormat }
        return settings.chain == nil ? ArchiveNames.plainFormat : ArchiveChainParts.format
    }

    /// Adds the pipeline's entry `jobIndex` (a file, database or extra entry) under `name`.
    private func addPipelineEntry(
        _ archive: OpaquePointer, name: [CChar], jobIndex: Int, plan: CompressionPlan, sources: PipelineEntrySources
    ) throws -> Int64 {
        let source = try sources.makeSource(in: archive, jobIndex: jobIndex)
        let index = zip_file_add(archive, name, source, zip_flags_t(ZIP_FL_ENC_GUESS))
        // Only for the rare failure: each path string costs an allocation.
        func what() -> String { plan.item(ofJob: jobIndex).relativePath }
        guard index >= 0 else {
            zip_source_free(source)
            throw libzipError(archive, "add \(what())")
        }
        if plan.jobs[jobIndex].method == .store {
            zip_set_file_compression(archive, zip_uint64_t(index), ZIP_CM_STORE, 0)
        }
        if settings.password != nil {
            // Already encrypted by the pipeline: no password here, so libzip copies it as it is.
            guard zip_file_set_encryption(archive, zip_uint64_t(index), UInt16(ZIP_EM_AES_256), nil) == 0 else {
                throw libzipError(archive, "encrypt \(what())")
            }
        }
        return index
    }

    /// One job per file and database with an entry (in the store's order), then the extras.
    private func planJobs(items: [StoreItem], snapshots: [String: DatabaseSnapshot]) -> CompressionPlan {
        let notStored = settings.chain?.notStored ?? [:]
        let extras = (settings.chain?.extraEntries ?? []).map { extra in
            StoreItem(
                relativePath: String(decoding: extra.name, as: UTF8.self), absolutePath: EscapedName.escapedRoot(extra.path),
                kind: .file, permissions: 0o644, modificationTime: Int64(settings.createdAt.timeIntervalSince1970),
                size: extra.size, linkTarget: nil)
        }
        var plan = CompressionPlan(items: items, extras: extras)
        // Indices, not copies of the items: the list of files is as long as the store.
        var files: [Int] = []
        for (index, item) in items.enumerated()
        where (item.kind == .file || item.kind == .database) && notStored[item.relativePath] == nil {
            files.append(index)
        }
        files += extras.indices.map { items.count + $0 }
        func item(_ index: Int) -> StoreItem { index < items.count ? items[index] : extras[index - items.count] }
        // Sampled on every core: a blob store's thousands of files take tens of
        // milliseconds on one, while nothing else can start.
        let sampled =
            settings.compressionLevel == 0
            ? [] : files.lazy.map(item).filter { snapshots[$0.relativePath] == nil && $0.size > 0 }
        let incompressible = IncompressibleSample.incompressiblePaths(Array(sampled), width: settings.workers)
        plan.reserveJobs(files.count)
        for index in files {
            let item = item(index)
            let snapshot = snapshots[item.relativePath]
            let size = snapshot?.size ?? item.size
            let method: CompressionPlan.Method
            if settings.compressionLevel == 0 || size == 0 {
                method = settings.password == nil ? .store : .storedDeflate
            } else if incompressible.contains(item.relativePath) {
                method = settings.password == nil ? .store : .storedDeflate
            } else {
                method = .deflate
            }
            plan.addJob(item: index, method: method, plannedSize: size, snapshot: snapshot)
        }
        return plan
    }

    /// The comment of encrypted archives.
    static let encryptedComment = "storebackup: encrypted (WinZip AES-256)"

    /// Small entries (links, the manifest) go through libzip's own AES: too small for speed to matter.
    private func encryptSmallEntry(_ archive: OpaquePointer, _ index: Int64, what: String) throws {
        guard let password = settings.password else { return }
        let rc = password.withCString { zip_file_set_encryption(archive, zip_uint64_t(index), UInt16(ZIP_EM_AES_256), $0) }
        guard rc == 0 else { throw libzipError(archive, "encrypt \(what)") }
    }

    private func setAttributes(_ archive: OpaquePointer, _ index: Int64, type: UInt32, item: StoreItem) throws {
        let entry = zip_uint64_t(index)
        let attributes = (type | (item.permissions & 0o7777)) << 16
        guard zip_file_set_external_attributes(archive, entry, 0, UInt8(ZIP_OPSYS_UNIX), attributes) == 0,
            zip_file_set_mtime(archive, entry, time_t(item.modificationTime), 0) == 0
        else {
            throw libzipError(archive, "set attributes of \(item.relativePath)")
        }
        let field = ZipTimestamp.encode(modificationTime: item.modificationTime)
        let rc = field.withUnsafeBufferPointer {
            zip_file_extra_field_set(
                archive, entry, ZipTimestamp.fieldID, zip_uint16_t(ZIP_EXTRA_FIELD_NEW),
                $0.baseAddress, zip_uint16_t($0.count), zip_flags_t(ZIP_FL_LOCAL | ZIP_FL_CENTRAL))
        }
        guard rc == 0 else { throw libzipError(archive, "set timestamp of \(item.relativePath)") }
        let ntfs = NTFSTimestamp.encode(modificationTime: item.modificationTime)
        let ntfsRC = ntfs.withUnsafeBufferPointer {
            zip_file_extra_field_set(
                archive, entry, NTFSTimestamp.fieldID, zip_uint16_t(ZIP_EXTRA_FIELD_NEW),
                $0.baseAddress, zip_uint16_t($0.count), zip_flags_t(ZIP_FL_LOCAL | ZIP_FL_CENTRAL))
        }
        guard ntfsRC == 0 else { throw libzipError(archive, "set timestamp of \(item.relativePath)") }
    }

    /// The manifest without its `files` rows (see ``manifestRow(ofItem:items:plan:pipeline:)``).
    /// Throws when a file's checksum is missing, so that every row can be made.
    private func manifestHead(
        items: [StoreItem], plan: CompressionPlan, snapshots: [String: DatabaseSnapshot], pipeline: CompressionPipeline,
        outsideLinks: [String], leftOut: [String], root: (permissions: UInt32, modificationTime: Int64)?
    ) throws -> Manifest {
        for jobIndex in plan.jobs.indices where pipeline.readSize(forJob: jobIndex) == nil {
            throw StoreBackupError.archiveWrite(reason: "checksum of \(plan.item(ofJob: jobIndex).relativePath) not ready")
        }
        var databases: [Manifest.Database] = []
        var proven = false
        for (itemIndex, item) in items.enumerated() where item.kind == .database {
            guard let snapshot = snapshots[item.relativePath] else { continue }
            var database = Manifest.Database(
                path: item.relativePath, pageSize: snapshot.pageSize, pageCount: snapshot.pageCount,
                journalMode: snapshot.journalMode, snapshotMethod: snapshot.method.rawValue)
            // The proof names the bytes the archive holds: the row's SHA-256 and size.
            if let signer = settings.proofs?.signer, snapshot.structureCheckResult() == .passed,
                case let row = manifestRow(ofItem: itemIndex, items: items, plan: plan, pipeline: pipeline), let sha256 = row.sha256
            {
                database.proof = signer.proof(sha256: sha256, size: row.size)
                proven = true
            }
            databases.append(database)
        }
        let scannedRoot = try? FileSystem.lstatInfo(settings.sourcePath)
        var manifest = Manifest(
            format: ArchiveNames.plainFormat, tool: "storebackup", toolVersion: StoreBackupVersion.current,
            hostName: settings.hostName, sourcePath: settings.sourcePath, createdAt: settings.createdAt,
            compressionLevel: settings.compressionLevel,
            rootMode: scannedRoot.map { UInt32($0.st_mode) & 0o7777 },
            rootMtime: scannedRoot.map { Int64($0.st_mtim.tv_sec) },
            files: [], databases: databases)
        if let chain = settings.chain {
            manifest.format = ArchiveChainParts.format
            manifest.kind = chain.kind
            manifest.base = chain.base
            manifest.chainLength = chain.chainLength
            manifest.hashSalt = chain.hashSalt
            manifest.pageMaps = chain.pageMaps
            manifest.pageDeltas = pageDeltaRows(chain: chain, plan: plan, pipeline: pipeline)
        }
        if proven { manifest.proofSalt = settings.proofs?.salt }
        manifest.outsideLinks = outsideLinks.isEmpty ? nil : outsideLinks
        manifest.leftOut = leftOut.isEmpty ? nil : leftOut
        if let root {
            manifest.rootMode = root.permissions
            manifest.rootMtime = root.modificationTime
        }
        if let kept = settings.storeManifest {
            manifest.databases = kept.databases
            manifest.proofSalt = kept.proofSalt
            manifest.rootMode = kept.rootMode
            manifest.rootMtime = kept.rootMtime
        }
        return manifest
    }

    /// How each page delta among the extras is stored (format 4): read back by a reader that
    /// takes one record out of one block. Nil when the archive has no page delta.
    private func pageDeltaRows(chain: ArchiveChainParts, plan: CompressionPlan, pipeline: CompressionPipeline) -> [Manifest.PageDelta]? {
        let storeJobCount = plan.jobs.count - plan.extras.count
        var rows: [Manifest.PageDelta] = []
        for (number, extra) in chain.extraEntries.enumerated() {
            guard let database = extra.patches, let result = pipeline.result(forJob: storeJobCount + number) else { continue }
            var row = Manifest.PageDelta(path: database, size: result.size, sha256: result.sha256)
            if let blocks = pipeline.compressedBlocks(forJob: storeJobCount + number), blocks.count > 1 {
                row.deflateBlockSize = CompressionPipeline.blockSize
                row.deflateBlocks = blocks
                row.deflateBlockHashes = pipeline.blockHashes(forJob: storeJobCount + number)
            }
            rows.append(row)
        }
        return rows.isEmpty ? nil : rows
    }

    /// The manifest's row of `items[itemIndex]`, once every file's data is read.
    private func manifestRow(
        ofItem itemIndex: Int, items: [StoreItem], plan: CompressionPlan, pipeline: CompressionPipeline
    ) -> Manifest.File {
        let item = items[itemIndex]
        var file = Manifest.File(
            path: item.relativePath, type: item.kind.rawValue, size: item.size, sha256: nil,
            mode: item.permissions, mtime: item.modificationTime, linkTarget: item.linkTarget)
        if let jobIndex = plan.job(ofItem: itemIndex), let result = pipeline.result(forJob: jobIndex) {
            file.size = result.size
            file.sha256 = result.sha256
            if let blocks = pipeline.compressedBlocks(forJob: jobIndex), blocks.count > 1 {
                file.deflateBlockSize = CompressionPipeline.blockSize
                file.deflateBlocks = blocks
                file.deflateBlockHashes = pipeline.blockHashes(forJob: jobIndex)
            }
        } else if let kept = settings.chain?.notStored[item.relativePath] {
            file.size = kept.size
            file.sha256 = kept.sha256
            file.source = kept.source
        } else if item.kind == .directory {
            file.size = 0
        }
        return file
    }

    private func libzipError(_ archive: OpaquePointer, _ what: String) -> StoreBackupError {
        if cancel.isCancelled { return .cancelled }
        return .archiveWrite(reason: "\(what): \(String(cString: zip_strerror(archive)))")
    }
}

/// Decides from a small sample whether a file is already compressed (JPEG, video, zip...).
/// Deflating such files costs CPU and saves nothing, so they are stored.
enum IncompressibleSample {
    /// The relative paths of the `files` that look incompressible: the scan's verdict where
    /// it took a sample (``StoreItem/looksIncompressible``), else a sample taken now, on
    /// `width` threads (each takes a contiguous range, so they share no lock).
    static func incompressiblePaths(_ files: [StoreItem], width: Int) -> Set<String> {
        var found = Set(files.lazy.filter { $0.looksIncompressible == true }.map(\.relativePath))
        let unsampled = files.filter { $0.looksIncompressible == nil && $0.size >= CompressibilitySample.minimumFileSize }
        guard !unsampled.isEmpty else { return found }
        let width = max(1, min(width, unsampled.count / 64))
        let sampled = Locked(Set<String>())
        WorkerPool.start(name: "storebackup-sample", width: width) { worker in
            var mine: [String] = []
            // One buffer per thread: a blob store has tens of thousands of files to sample.
            let sample = UnsafeMutableRawBufferPointer.allocate(byteCount: CompressibilitySample.size, alignment: 16)
            defer { sample.deallocate() }
            for index in (unsampled.count * worker / width)..<(unsampled.count * (worker + 1) / width) {
                let file = unsampled[index]
                if CompressibilitySample.looksIncompressible(path: file.absolutePath, size: file.size, sample: sample) {
                    mine.append(file.relativePath)
                }
            }
            sampled.withLock { $0.formUnion(mine) }
        }.join()
        found.formUnion(sampled.current)
        return found
    }

}
