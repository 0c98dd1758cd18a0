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
        if case StoreBackupError.cancelled = error {
            zip_error_set(&self.error, ZIP_ER_CANCELLED, 0)
        } else {
            zip_error_set(&self.error, ZIP_ER_READ, EIO)
        }
        return -1
    }

    static func supportedCommands() -> Int64 {
        let commands = [
            ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, ZIP_SOURCE_SUPPORTS,
        ]
        return commands.reduce(Int64(0)) { $0 | (Int64(1) << Int64($1.rawValue)) }
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

/// Serves one file's data from the compression pipeline, already deflated (or stored).
///
/// With a password, the data is also already encrypted (WinZip AES-256, by the pipeline's
/// workers; the HMAC and the salt header are added here) and says so in
/// its STAT answer: with the entry's encryption set to AES-256 and no password of its own
/// (`zip_file_set_encryption(archive, index, ZIP_EM_AES_256, NULL)`), libzip sees the
/// source and the entry agree and copies the bytes unchanged (zip_close.c, add_data),
/// writing the AES extra field (0x9901) itself.
final class PipelineEntrySource: ZipSourceCallbackObject {
    private let pipeline: CompressionPipeline
    private let jobIndex: Int
    private let job: CompressionPipeline.Job
    private let password: BackupPassword?
    /// The HMAC over the ciphertext, which has to be computed in order, so here.
    private var authenticator: WinZipAuthenticator?
    /// Bytes to serve before the next block (the AES header) or after the last (the MAC).
    private var pending: [UInt8] = []
    private var pendingPosition = 0
    private var current: CompressionPipeline.Block?
    private var position = 0
    private var finished = false
    private var crc: UInt32 = 0
    private var size: Int64 = 0

    init(pipeline: CompressionPipeline, jobIndex: Int, password: BackupPassword?) {
        self.pipeline = pipeline
        self.jobIndex = jobIndex
        self.job = pipeline.jobs[jobIndex]
        self.password = password
    }

    override func handle(command: zip_source_cmd_t, data: UnsafeMutableRawPointer?, length: UInt64) -> Int64 {
        switch command {
        case ZIP_SOURCE_OPEN:
            guard password != nil else { return 0 }
            do {
                let secrets = try pipeline.entrySecrets(forJob: jobIndex)
                authenticator = WinZipAuthenticator(keys: secrets.keys)
                pending = secrets.header
                pendingPosition = 0
                return 0
            } catch {
                return fail(error)
            }
        case ZIP_SOURCE_STAT:
            return Self.writeStat(data, length: length) { stat in
                stat.valid = UInt64(ZIP_STAT_SIZE | ZIP_STAT_COMP_METHOD | ZIP_STAT_MTIME)
                stat.size = UInt64(finished ? size : job.plannedSize)
                stat.comp_method = job.method == .store ? UInt16(ZIP_CM_STORE) : UInt16(ZIP_CM_DEFLATE)
                stat.mtime = time_t(job.item.modificationTime)
                if password != nil {
                    stat.valid |= UInt64(ZIP_STAT_ENCRYPTION_METHOD)
                    stat.encryption_method = UInt16(ZIP_EM_AES_256)
                }
                if finished {
                    stat.valid |= UInt64(ZIP_STAT_CRC)
                    stat.crc = crc
                }
            }
        case ZIP_SOURCE_READ:
            guard let data else { return -1 }
            do { return Int64(try read(into: data, capacity: Int(length))) } catch { return fail(error) }
        default:
            zip_error_set(&error, ZIP_ER_OPNOTSUPP, 0)
            return -1
        }
    }

    private func read(into destination: UnsafeMutableRawPointer, capacity: Int) throws -> Int {
        while true {
            if pendingPosition < pending.count {
                let count = min(capacity, pending.count - pendingPosition)
                pending.withUnsafeBytes { destination.copyMemory(from: $0.baseAddress! + pendingPosition, byteCount: count) }
                pendingPosition += count
                return count
            }
            if let block = current, let output = block.output, position < output.count {
                let count = min(capacity, output.count - position)
                destination.copyMemory(from: output.bytes + position, byteCount: count)
                position += count
                // libzip writes what it reads straight on, so this counts the archive's bytes.
                pipeline.writeback?.wrote(count)
                return count
            }
            if let block = current {
                pipeline.recycle(block)
                current = nil
                if block.isLast {
                    finished = true
                    if let authenticator {
                        pending = authenticator.code()
                        pendingPosition = 0
                        continue
                    }
                    return 0
                }
            }
            if finished { return 0 }
            let block = try pipeline.nextBlock(forJob: jobIndex)
            pipeline.recordCompressedBlock(job: jobIndex, size: block.output?.count ?? 0)
            crc = UInt32(crc32_combine(uLong(crc), uLong(block.crc), off_t(block.uncompressedCount)))
            size += Int64(block.uncompressedCount)
            if let output = block.output {
                authenticator?.update(output.contents)
            }
            current = block
            position = 0
        }
    }
}

/// Serves bytes that are only known once earlier entries are written (the manifest),
/// or small fixed content (a symbolic link's target).
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
