import CZip
import Foundation

/// A libzip source is a C callback plus a context pointer. Each source object here is
/// retained by libzip (through `Unmanaged`) until libzip sends ZIP_SOURCE_FREE.
class ZipSourceCallbackObject {
    var error = zip_error_t()

    init() { zip_error_init(&error) }

    deinit { zip_error_fini(&error) }

    func handle(command: zip_source_cmd_t, data: UnsafeMutableRawPointer?, length: UInt64) -> Int64 {
        -1
    }

    /// Creates the libzip source; libzip owns one retain until it frees the source.
    func makeSource(in archive: OpaquePointer) throws -> OpaquePointer {
        let context = Unmanaged.passRetained(self).toOpaque()
        guard let source = zip_source_function(archive, zipSourceTrampoline, context) else {
            Unmanaged<ZipSourceCallbackObject>.fromOpaque(context).release()
            throw StoreBackupError.archiveWrite(reason: String(cString: zip_strerror(archive)))
        }
        return source
    }

    func fail(_ error: Error) -> Int64 {
        Self.record(error, in: &self.error)
    }

    /// Sets `zipError` to what libzip should say of `error`; returns -1, a callback's failure.
    static func record(_ error: Error, in zipError: inout zip_error_t) -> Int64 {
        if case StoreBackupError.cancelled = error {
            zip_error_set(&zipError, ZIP_ER_CANCELLED, 0)
        } else {
            zip_error_set(&zipError, ZIP_ER_READ, EIO)
        }
        return -1
    }

    static func supportedCommands() -> Int64 {
        ZipSource.commandMask([
            ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, ZIP_SOURCE_SUPPORTS,
        ])
    }

    func answerCommon(command: zip_source_cmd_t, data: UnsafeMutableRawPointer?, length: UInt64) -> Int64? {
        switch command {
        case ZIP_SOURCE_ERROR:
            return zip_error_to_data(&error, data, length)
        case ZIP_SOURCE_SUPPORTS:
            return Self.supportedCommands()
        case ZIP_SOURCE_FREE:
            Unmanaged.passUnretained(self).release()
            return 0
        case ZIP_SOURCE_CLOSE:
            return 0
        default:
            return nil
        }
    }

    static func writeStat(_ data: UnsafeMutableRawPointer?, length: UInt64, fill: (inout zip_stat_t) -> Void) -> Int64 {
        guard let data, length >= UInt64(MemoryLayout<zip_stat_t>.size) else { return -1 }
        let stat = data.assumingMemoryBound(to: zip_stat_t.self)
        zip_stat_init(stat)
        fill(&stat.pointee)
        return Int64(MemoryLayout<zip_stat_t>.size)
    }
}

private let zipSourceTrampoline: zip_source_callback = { context, data, length, command in
    let object = Unmanaged<ZipSourceCallbackObject>.fromOpaque(context!).takeUnretainedValue()
    if let answer = object.answerCommon(command: command, data: data, length: length) { return answer }
    return object.handle(command: command, data: data, length: length)
}

/// The libzip sources of all the pipeline's entries (files, databases, a chain's extra
/// entries), each serving its data from the compression pipeline, already deflated (or stored).
///
/// One object for all of them (``ZipSourceTable``; a slot is a job index). The state of
/// reading exists only for the entry libzip is reading (one at a time, in `zip_close`),
/// from ZIP_SOURCE_OPEN to ZIP_SOURCE_CLOSE.
///
/// With a password, the data is also already encrypted (WinZip AES-256, by the pipeline's
/// workers; the HMAC and the salt header are added here) and says so in
/// its STAT answer: with the entry's encryption set to AES-256 and no password of its own
/// (`zip_file_set_encryption(archive, index, ZIP_EM_AES_256, NULL)`), libzip sees the
/// source and the entry agree and copies the bytes unchanged (zip_close.c, add_data),
/// writing the AES extra field (0x9901) itself.
final class PipelineEntrySources: ZipSourceTable {
    private let pipeline: CompressionPipeline
    private let password: BackupPassword?
    /// Per job, once all of its data is served: its CRC-32, for libzip's STAT after reading.
    private var crcs: [UInt32]
    private var served: [Bool]
    /// The entry libzip is reading.
    private var reading: EntryReading?

    /// Where libzip is in one entry's data.
    private final class EntryReading {
        let jobIndex: Int
        /// The HMAC over the ciphertext, which has to be computed in order, so here.
        var authenticator: WinZipAuthenticator?
        /// Bytes to serve before the next block (the AES header) or after the last (the MAC).
        var pending: [UInt8] = []
        var pendingPosition = 0
        var current: CompressionPipeline.Block?
        var position = 0
        var finished = false
        var crc: UInt32 = 0

        init(jobIndex: Int) { self.jobIndex = jobIndex }
    }

    init(pipeline: CompressionPipeline, password: BackupPassword?) {
        self.pipeline = pipeline
        self.password = password
        crcs = [UInt32](repeating: 0, count: pipeline.jobs.count)
        served = [Bool](repeating: false, count: pipeline.jobs.count)
        super.init(slotCount: pipeline.jobs.count)
    }

    /// Creates the libzip source of job `jobIndex`; libzip holds this object until it frees the source.
    func makeSource(in archive: OpaquePointer, jobIndex: Int) throws -> OpaquePointer {
        try makeSource(in: archive, slot: jobIndex)
    }

    override func handle(slot jobIndex: Int, command: zip_source_cmd_t, data: UnsafeMutableRawPointer?, length: UInt64) -> Int64 {
        switch command {
        case ZIP_SOURCE_OPEN:
            let entry = EntryReading(jobIndex: jobIndex)
            reading = entry
            guard password != nil else { return 0 }
            do {
                let secrets = try pipeline.entrySecrets(forJob: jobIndex)
                entry.authenticator = WinZipAuthenticator(keys: secrets.keys)
                entry.pending = secrets.header
                return 0
            } catch {
                return ZipSourceCallbackObject.record(error, in: &self.error)
            }
        case ZIP_SOURCE_CLOSE:
            if let entry = reading, entry.jobIndex == jobIndex {
                if let block = entry.current { pipeline.recycle(block) }
                reading = nil
            }
            return 0
        case ZIP_SOURCE_STAT:
            let job = pipeline.jobs[jobIndex]
            let modificationTime = pipeline.plan.item(ofJob: jobIndex).modificationTime
            let finished = served[jobIndex]
            let size = finished ? pipeline.readSize(forJob: jobIndex) ?? job.plannedSize : job.plannedSize
            return ZipSourceCallbackObject.writeStat(data, length: length) { stat in
                stat.valid = UInt64(ZIP_STAT_SIZE | ZIP_STAT_COMP_METHOD | ZIP_STAT_MTIME)
                stat.size = UInt64(size)
                stat.comp_method = job.method == .store ? UInt16(ZIP_CM_STORE) : UInt16(ZIP_CM_DEFLATE)
                stat.mtime = time_t(modificationTime)
                if password != nil {
                    stat.valid |= UInt64(ZIP_STAT_ENCRYPTION_METHOD)
                    stat.encryption_method = UInt16(ZIP_EM_AES_256)
                }
                if finished {
                    stat.valid |= UInt64(ZIP_STAT_CRC)
                    stat.crc = crcs[jobIndex]
                }
            }
        case ZIP_SOURCE_READ:
            guard let data, let entry = reading, entry.jobIndex == jobIndex else {
                zip_error_set(&error, ZIP_ER_INTERNAL, 0)
                return -1
            }
            do {
                return Int64(try read(entry, into: data, capacity: Int(length)))
            } catch {
                return ZipSourceCallbackObject.record(error, in: &self.error)
            }
        default:
            zip_error_set(&error, ZIP_ER_OPNOTSUPP, 0)
            return -1
        }
    }

    private func read(_ entry: EntryReading, into destination: UnsafeMutableRawPointer, capacity: Int) throws -> Int {
        while true {
            if entry.pendingPosition < entry.pending.count {
                let count = min(capacity, entry.pending.count - entry.pendingPosition)
                entry.pending.withUnsafeBytes {
                    destination.copyMemory(from: $0.baseAddress! + entry.pendingPosition, byteCount: count)
                }
                entry.pendingPosition += count
                return count
            }
            if let block = entry.current, let output = block.output, entry.position < output.count {
                let count = min(capacity, output.count - entry.position)
                destination.copyMemory(from: output.bytes + entry.position, byteCount: count)
                entry.position += count
                return count
            }
            if let block = entry.current {
                pipeline.recycle(block)
                entry.current = nil
                if block.isLast {
                    entry.finished = true
                    crcs[entry.jobIndex] = entry.crc
                    served[entry.jobIndex] = true
                    pipeline.finishedEntry(forJob: entry.jobIndex)
                    if let authenticator = entry.authenticator {
                        entry.pending = authenticator.code()
                        entry.pendingPosition = 0
                        continue
                    }
                    return 0
                }
            }
            if entry.finished { return 0 }
            let block = try pipeline.nextBlock(forJob: entry.jobIndex)
            entry.crc = UInt32(crc32_combine(uLong(entry.crc), uLong(block.crc), off_t(block.uncompressedCount)))
            if let output = block.output {
                entry.authenticator?.update(output.contents)
            }
            entry.current = block
            entry.position = 0
        }
    }
}

/// The libzip sources of the store's links and FIFOs: a link's entry holds its target's
/// bytes, a FIFO's nothing. One object for all of them (``ZipSourceTable``; a slot is the
/// link's or FIFO's number among them, in the items' order); the content is made from the
/// item when libzip asks for it.
final class ItemContentSources: ZipSourceTable {
    private let items: [StoreItem]
    /// Per slot, the item's index in `items`.
    private var itemOfSlot: [Int32] = []
    /// The content of the entry libzip is reading, and how much of it is served.
    private var reading: (slot: Int, content: [UInt8], position: Int)?

    init(items: [StoreItem]) {
        self.items = items
        var count = 0
        for item in items where item.kind == .symlink || item.kind == .fifo { count += 1 }
        super.init(slotCount: count)
        itemOfSlot.reserveCapacity(count)
    }

    /// Creates the source of `items[index]`, a link or a FIFO.
    func makeSource(in archive: OpaquePointer, item index: Int) throws -> OpaquePointer {
        itemOfSlot.append(Int32(index))
        return try makeSource(in: archive, slot: itemOfSlot.count - 1)
    }

    private func content(ofSlot slot: Int) -> [UInt8] {
        let item = items[Int(itemOfSlot[slot])]
        return item.kind == .symlink ? EscapedName.bytes(item.linkTarget ?? "") : []
    }

    override func handle(slot: Int, command: zip_source_cmd_t, data: UnsafeMutableRawPointer?, length: UInt64) -> Int64 {
        switch command {
        case ZIP_SOURCE_OPEN:
            reading = (slot, content(ofSlot: slot), 0)
            return 0
        case ZIP_SOURCE_CLOSE:
            if reading?.slot == slot { reading = nil }
            return 0
        case ZIP_SOURCE_STAT:
            let size = reading.flatMap { $0.slot == slot ? $0.content.count : nil } ?? content(ofSlot: slot).count
            let modificationTime = items[Int(itemOfSlot[slot])].modificationTime
            return ZipSourceCallbackObject.writeStat(data, length: length) { stat in
                stat.valid = UInt64(ZIP_STAT_SIZE | ZIP_STAT_MTIME)
                stat.size = UInt64(size)
                stat.mtime = time_t(modificationTime)
            }
        case ZIP_SOURCE_READ:
            guard let data, var current = reading, current.slot == slot else {
                zip_error_set(&error, ZIP_ER_INTERNAL, 0)
                return -1
            }
            let count = min(Int(length), current.content.count - current.position)
            guard count > 0 else { return 0 }
            current.content.withUnsafeBytes { data.copyMemory(from: $0.baseAddress! + current.position, byteCount: count) }
            current.position += count
            reading = current
            return Int64(count)
        default:
            return super.handle(slot: slot, command: command, data: data, length: length)
        }
    }
}

/// Serves small content made when libzip first asks for it (the format marker; links and
/// FIFOs go through ``ItemContentSources``, the manifest through ``ManifestEntrySource``).
final class LazyDataSource: ZipSourceCallbackObject {
    private let produce: () throws -> Data
    private var content: Data?
    private var position = 0
    private let modificationTime: Int64

    init(modificationTime: Int64, produce: @escaping () throws -> Data) {
        self.produce = produce
        self.modificationTime = modificationTime
    }

    private func load() throws -> Data {
        if let content { return content }
        let data = try produce()
        content = data
        return data
    }

    override func handle(command: zip_source_cmd_t, data: UnsafeMutableRawPointer?, length: UInt64) -> Int64 {
        do {
            switch command {
            case ZIP_SOURCE_OPEN:
                _ = try load()
                position = 0
                return 0
            case ZIP_SOURCE_STAT:
                let size = try load().count
                return Self.writeStat(data, length: length) { stat in
                    stat.valid = UInt64(ZIP_STAT_SIZE | ZIP_STAT_MTIME)
                    stat.size = UInt64(size)
                    stat.mtime = time_t(modificationTime)
                }
            case ZIP_SOURCE_READ:
                guard let data else { return -1 }
                let content = try load()
                let count = min(Int(length), content.count - position)
                guard count > 0 else { return 0 }
                content.withUnsafeBytes { data.copyMemory(from: $0.baseAddress! + position, byteCount: count) }
                position += count
                return Int64(count)
            default:
                zip_error_set(&error, ZIP_ER_OPNOTSUPP, 0)
                return -1
            }
        } catch {
            return fail(error)
        }
    }
}
