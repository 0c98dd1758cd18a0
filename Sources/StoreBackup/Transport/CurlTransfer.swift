import CCurl
import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Performs one `TransferRequest` with a libcurl easy handle, streaming request and
/// response bodies through callbacks (memory stays bounded), and reporting progress.
/// Blocking: call it from a worker thread (see `runBlocking`).
struct CurlTransfer {
    let options: TransportOptions

    private static let globalInit: Void = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) }()

    func perform(
        _ request: TransferRequest, cancel: CancellationFlag?,
        progress: (@Sendable (_ sent: Int64, _ received: Int64) -> Void)? = nil
    ) throws -> TransferResponse {
        _ = Self.globalInit
        guard let handle = curl_easy_init() else {
            throw StoreBackupError.transferFailed(.other, label: request.label, "cannot create a libcurl handle")
        }
        defer { curl_easy_cleanup(handle) }
        let context = try TransferContext(
            request: request, cancel: cancel, progress: progress,
            uploadLimit: options.uploadLimit, downloadLimit: options.downloadLimit)
        defer { context.close() }
        let unmanaged = Unmanaged.passRetained(context)
        defer { unmanaged.release() }
        let userdata = unmanaged.toOpaque()

        var strings = CStringKeeper()
        defer { strings.free() }
        var headerList: UnsafeMutablePointer<curl_slist>?
        var preQuote: UnsafeMutablePointer<curl_slist>?
        var postQuote: UnsafeMutablePointer<curl_slist>?
        defer {
            curl_slist_free_all(headerList)
            curl_slist_free_all(preQuote)
            curl_slist_free_all(postQuote)
        }

        func set(_ option: CURLoption, _ value: Int) { sb_curl_setopt_long(handle, option, value) }
        func set(_ option: CURLoption, _ value: String) { sb_curl_setopt_string(handle, option, strings.keep(value)) }

        set(CURLOPT_URL, request.url)
        set(CURLOPT_NOSIGNAL, 1)
        set(CURLOPT_CONNECTTIMEOUT, options.connectTimeout)
        set(CURLOPT_LOW_SPEED_LIMIT, options.lowSpeedLimit)
        set(CURLOPT_LOW_SPEED_TIME, options.lowSpeedTime)
        set(CURLOPT_FOLLOWLOCATION, 0)
        if let caFile = options.caFile { set(CURLOPT_CAINFO, caFile) }
        if options.insecure {
            set(CURLOPT_SSL_VERIFYPEER, 0)
            set(CURLOPT_SSL_VERIFYHOST, 0)
        }

        switch request.credentials {
        case .none:
            break
        case .basic(let user, let password):
            set(CURLOPT_HTTPAUTH, 1)  // CURLAUTH_BASIC
            set(CURLOPT_USERNAME, user)
            set(CURLOPT_PASSWORD, password)
        case .awsSigV4(let accessKey, let secretKey, let region, let service):
            set(CURLOPT_AWS_SIGV4, "aws:amz:\(region):\(service)")
            set(CURLOPT_USERNAME, accessKey)
            set(CURLOPT_PASSWORD, secretKey)
        case .bearer(let token):
            set(CURLOPT_HTTPAUTH, 1 << 6)  // CURLAUTH_BEARER
            set(CURLOPT_XOAUTH2_BEARER, token)
        case .sshKey(let user, let privateKey, let publicKey, let knownHosts):
            set(CURLOPT_USERNAME, user)
            set(CURLOPT_SSH_AUTH_TYPES, 1)  // CURLSSH_AUTH_PUBLICKEY
            set(CURLOPT_SSH_PRIVATE_KEYFILE, privateKey)
            if let publicKey { set(CURLOPT_SSH_PUBLIC_KEYFILE, publicKey) }
            // With a known_hosts file and no callback, libcurl refuses unknown and changed host keys.
            set(CURLOPT_SSH_KNOWNHOSTS, knownHosts)
        }

        for (name, value) in request.headers {
            headerList = curl_slist_append(headerList, "\(name): \(value)")
        }
        // A `Range` header over HTTP, an offset and length over sftp. For a GET libcurl adds
        // the header itself, outside the SigV4 signature (a proxy or cache may drop it); for
        // other methods (Dropbox downloads are POSTs) it sends none, so it is written here.
        if let range = request.byteRange, !range.isEmpty {
            let bytes = "\(range.lowerBound)-\(range.upperBound - 1)"
            if request.url.hasPrefix("http"), request.method != "GET" {
                headerList = curl_slist_append(headerList, "Range: bytes=\(bytes)")
            } else {
                set(CURLOPT_RANGE, bytes)
            }
        }
        // curl adds "Expect: 100-continue" for large uploads; an empty value turns it off
        // (one round trip less). Not with SigV4: libcurl would sign the empty header it then omits.
        if case .awsSigV4 = request.credentials {
        } else {
            headerList = curl_slist_append(headerList, "Expect:")
        }
        sb_curl_setopt_pointer(handle, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(headerList))
        if !request.preQuote.isEmpty {
            for command in request.preQuote { preQuote = curl_slist_append(preQuote, command) }
            sb_curl_setopt_pointer(handle, CURLOPT_QUOTE, UnsafeMutableRawPointer(preQuote))
        }
        if !request.postQuote.isEmpty {
            for command in request.postQuote { postQuote = curl_slist_append(postQuote, command) }
            sb_curl_setopt_pointer(handle, CURLOPT_POSTQUOTE, UnsafeMutableRawPointer(postQuote))
        }
        if request.directoryListOnly { set(CURLOPT_DIRLISTONLY, 1) }
        if request.url.hasPrefix("sftp://"), case .file(_, let offset) = request.sink, offset > 0 {
            sb_curl_setopt_off(handle, CURLOPT_RESUME_FROM_LARGE, curl_off_t(offset))
        }
        if request.createMissingDirectories { set(CURLOPT_FTP_CREATE_MISSING_DIRS, 1) }

        let bodyLength = context.bodyLength
        switch request.method {
        case "GET":
            set(CURLOPT_HTTPGET, 1)
        case "HEAD":
            set(CURLOPT_NOBODY, 1)
        case "PUT":
            set(CURLOPT_UPLOAD, 1)
            sb_curl_setopt_off(handle, CURLOPT_INFILESIZE_LARGE, curl_off_t(bodyLength))
        case "POST":
            set(CURLOPT_POST, 1)
            sb_curl_setopt_off(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(bodyLength))
        default:
            set(CURLOPT_CUSTOMREQUEST, request.method)
            if bodyLength > 0 {
                set(CURLOPT_UPLOAD, 1)
                sb_curl_setopt_off(handle, CURLOPT_INFILESIZE_LARGE, curl_off_t(bodyLength))
            }
        }
        if request.url.hasPrefix("sftp://"), case .file = request.body {
            set(CURLOPT_UPLOAD, 1)
            sb_curl_setopt_off(handle, CURLOPT_INFILESIZE_LARGE, curl_off_t(bodyLength))
        }

        sb_curl_setopt_data_callback(handle, CURLOPT_READFUNCTION, curlReadCallback)
        sb_curl_setopt_pointer(handle, CURLOPT_READDATA, userdata)
        sb_curl_setopt_seek_callback(handle, curlSeekCallback)
        sb_curl_setopt_pointer(handle, CURLOPT_SEEKDATA, userdata)
        sb_curl_setopt_data_callback(handle, CURLOPT_WRITEFUNCTION, curlWriteCallback)
        sb_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, userdata)
        sb_curl_setopt_data_callback(handle, CURLOPT_HEADERFUNCTION, curlHeaderCallback)
        sb_curl_setopt_pointer(handle, CURLOPT_HEADERDATA, userdata)
        sb_curl_setopt_progress_callback(handle, curlProgressCallback)
        sb_curl_setopt_pointer(handle, CURLOPT_XFERINFODATA, userdata)
        set(CURLOPT_NOPROGRESS, 0)

        let code = curl_easy_perform(handle)
        if let failure = context.failure { throw failure }
        var status = 0
        sb_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        if code != CURLE_OK {
            throw Self.classify(code: code, label: request.label, url: request.url, status: status, cancelled: cancel?.isCancelled ?? false)
        }
        try context.checkDownloadComplete(status: status)
        return TransferResponse(
            status: status, headers: context.headers, body: context.memory, bytesReceived: context.received,
            sha256: context.hasher.map { FileDigest.hex($0.finalize()) }, bytesWritten: context.positionedWritten)
    }

    static func classify(code: CURLcode, label: String, url: String, status: Int, cancelled: Bool) -> Error {
        if cancelled || code == CURLE_ABORTED_BY_CALLBACK { return StoreBackupError.cancelled }
        let text = String(cString: curl_easy_strerror(code))
        let kind = TransferClassifier.kind(of: code, url: url)
        if kind == .hostKey {
            return StoreBackupError.transferFailed(
                .hostKey, label: label, "the server's host key is not in known_hosts or does not match it",
                curlCode: Int(code.rawValue))
        }
        return StoreBackupError.transferFailed(kind, label: label, text, curlCode: Int(code.rawValue))
    }
}

/// Keeps C strings alive for the duration of one transfer (libcurl copies most, not all).
private struct CStringKeeper {
    private var pointers: [UnsafeMutablePointer<CChar>] = []
    mutating func keep(_ value: String) -> UnsafeMutablePointer<CChar> {
        let pointer = strdup(value)!
        pointers.append(pointer)
        return pointer
    }
    mutating func free() {
        for pointer in pointers {
            // Wipe before freeing: some of these are passwords.
            memset(pointer, 0, strlen(pointer))
            Glibc.free(pointer)
        }
        pointers.removeAll()
    }
}

/// State shared with libcurl's callbacks during one transfer.
// Unchecked: used by one thread at a time, the one running the transfer (libcurl calls back on it).
final class TransferContext: @unchecked Sendable {
    let request: TransferRequest
    let cancel: CancellationFlag?
    let progress: (@Sendable (Int64, Int64) -> Void)?
    var headers: [String: String] = [:]
    var memory = Data()
    var received: Int64 = 0
    var failure: Error?
    let bodyLength: Int64

    private var bodyData: Data?
    private var bodyFile: Int32 = -1
    private var bodyOffset: Int64 = 0
    private var bodyPosition: Int64 = 0
    private var sinkFile: Int32 = -1
    private var sinkOffset: Int64 = 0
    private var memoryLimit = 0
    /// The `.positioned` sink: where its bytes go, how many it may take, how many it wrote.
    private var positionedFile: Int32 = -1
    private var positionedOffset: Int64 = 0
    private var positionedLimit = 0
    private(set) var positionedWritten: Int64 = 0
    /// The running hash of a `.sha256` sink.
    private(set) var hasher: SHA256?

    /// The command's shared caps on bytes per second, when it has them.
    private let uploadLimit: RateLimit?
    private let downloadLimit: RateLimit?

    init(
        request: TransferRequest, cancel: CancellationFlag?, progress: (@Sendable (Int64, Int64) -> Void)?,
        uploadLimit: RateLimit? = nil, downloadLimit: RateLimit? = nil
    ) throws {
        self.request = request
        self.uploadLimit = uploadLimit
        self.downloadLimit = downloadLimit
        self.cancel = cancel
        self.progress = progress
        switch request.body {
        case .none:
            bodyLength = 0
        case .bytes(let data):
            bodyData = data
            bodyLength = Int64(data.count)
        case .file(let path, let offset, let length):
            bodyFile = open(path, O_RDONLY | O_CLOEXEC)
            guard bodyFile >= 0 else { throw StoreBackupError.io(path: path, operation: "open", errno: errno) }
            bodyOffset = offset
            bodyLength = length
        }
        switch request.sink {
        case .memory(let limit):
            memoryLimit = limit
        case .sha256:
            memoryLimit = 1 << 20
            hasher = SHA256()
        case .file(let path, let offset):
            sinkFile = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
            guard sinkFile >= 0 else { throw StoreBackupError.io(path: path, operation: "create", errno: errno) }
            sinkOffset = offset
            ftruncate(sinkFile, off_t(offset))
            lseek(sinkFile, off_t(offset), SEEK_SET)
        case .positioned(let descriptor, let offset, let limit):
            // Not owned: the caller opened it and keeps it open across requests.
            positionedFile = descriptor
            positionedOffset = offset
            positionedLimit = limit
            memoryLimit = 1 << 20
        }
    }

    func close() {
        if bodyFile >= 0 { Glibc.close(bodyFile); bodyFile = -1 }
        if sinkFile >= 0 { Glibc.close(sinkFile); sinkFile = -1 }
    }

    /// Whether the response is a success, so its body should go to the sink
    /// (an error body goes to memory, to be shown to the user).
    private var currentStatus = 0

    func readBody(into buffer: UnsafeMutablePointer<CChar>, capacity: Int) -> Int {
        let remaining = bodyLength - bodyPosition
        guard remaining > 0 else { return 0 }
        let count = Int(min(Int64(capacity), remaining))
        if let bodyData {
            bodyData.withUnsafeBytes { bytes in
                UnsafeMutableRawPointer(buffer).copyMemory(from: bytes.baseAddress! + Int(bodyPosition), byteCount: count)
            }
            bodyPosition += Int64(count)
            return count
        }
        let got: Int
        do {
            got = try PositionedRead.some(
                bodyFile, into: UnsafeMutableRawBufferPointer(start: buffer, count: count), at: bodyOffset + bodyPosition,
                path: request.label, operation: "read upload data")
        } catch {
            failure = StoreBackupError.wrapping(error)
            return Int(CURL_READFUNC_ABORT)
        }
        guard got > 0 else {
            failure = StoreBackupError.io(path: request.label, operation: "read upload data", errno: EIO)
            return Int(CURL_READFUNC_ABORT)
        }
        if let uploadLimit, !uploadLimit.pace(got, cancel: cancel) { return Int(CURL_READFUNC_ABORT) }
        bodyPosition += Int64(got)
        return got
    }

    func seekBody(to offset: Int64) -> Bool {
        guard offset >= 0 && offset <= bodyLength else { return false }
        bodyPosition = offset
        return true
    }

    func receive(_ bytes: UnsafeRawBufferPointer) -> Int {
        if failure != nil { return 0 }
        if let downloadLimit, !downloadLimit.pace(bytes.count, cancel: cancel) { return 0 }
        received += Int64(bytes.count)
        let success = (200..<300).contains(currentStatus) || currentStatus == 0
        if hasher != nil && success {
            hasher!.update(bufferPointer: bytes)
            return bytes.count
        }
        if positionedFile >= 0 && success { return writePositioned(bytes) }
        if sinkFile >= 0 && success {
            var offset = 0
            while offset < bytes.count {
                let wrote = write(sinkFile, bytes.baseAddress! + offset, bytes.count - offset)
                if wrote < 0 {
                    if errno == EINTR { continue }
                    failure = StoreBackupError.io(path: request.label, operation: "write download", errno: errno)
                    return 0
                }
                offset += wrote
            }
            return bytes.count
        }
        let limit = sinkFile >= 0 ? 1 << 20 : memoryLimit
        if memory.count + bytes.count > limit {
            failure = StoreBackupError.transferFailed(
                .other, label: request.label, "the answer is larger than expected", serviceCode: RangedRead.answerTooLarge)
            return 0
        }
        memory.append(contentsOf: bytes)
        return bytes.count
    }

    /// The `.positioned` sink: the bytes go to their place in the file as they come, and an
    /// answer longer than asked for stops before it writes past its range.
    private func writePositioned(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard positionedWritten + Int64(bytes.count) <= Int64(positionedLimit) else {
            failure = StoreBackupError.transferFailed(
                .other, label: request.label, "the answer is larger than expected", serviceCode: RangedRead.answerTooLarge)
            return 0
        }
        var done = 0
        while done < bytes.count {
            let at = off_t(positionedOffset + positionedWritten) + off_t(done)
            let wrote = pwrite(positionedFile, bytes.baseAddress! + done, bytes.count - done, at)
            if wrote < 0 {
                if errno == EINTR { continue }
                failure = StoreBackupError.io(path: request.label, operation: "write download", errno: errno)
                return 0
            }
            done += wrote
        }
        positionedWritten += Int64(bytes.count)
        return bytes.count
    }

    func receiveHeader(_ line: String) {
        let trimmed = line.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.hasPrefix("HTTP/") {
            // A new response (after 100 Continue or a redirect): start over.
            headers = [:]
            positionedWritten = 0
            let parts = trimmed.split(separator: " ")
            currentStatus = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
            return
        }
        if trimmed.isEmpty {
            if sinkFile >= 0 && sinkOffset > 0 && (200..<300).contains(currentStatus) { acceptResumedAnswer() }
            return
        }
        guard let colon = trimmed.firstIndex(of: ":") else { return }
        let name = trimmed[..<colon].lowercased()
        let value = trimmed[trimmed.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        headers[name] = value
    }

    /// A resumed download (`Range: bytes=OFFSET-`) keeps what it has only when the answer
    /// says it continues exactly there: `206` with a matching `Content-Range`, or a `200`
    /// that carries one (rclone's S3 server answers ranges so). A `200` without it is the
    /// whole file: start the file over. Any other range cannot be trusted: drop the partial
    /// file and fail, so the retry downloads from zero.
    private func acceptResumedAnswer() {
        let range = headers["content-range"].flatMap(ContentRange.init)
        if let range, range.first == sinkOffset { return }
        ftruncate(sinkFile, 0)
        lseek(sinkFile, 0, SEEK_SET)
        if currentStatus == 200 && range == nil {
            sinkOffset = 0
            return
        }
        sinkOffset = 0
        failure = StoreBackupError.transferFailed(
            .connection, label: request.label,
            "the server answered the resumed download with "
                + "another range (\(headers["content-range"] ?? "none")); starting over")
    }

    /// After a download that libcurl calls complete: the file must have the size the
    /// server announced (Content-Range total, or offset + Content-Length). Short: keep it
    /// (the retry resumes); longer: start over. Either way a retryable failure, never damage.
    func checkDownloadComplete(status: Int) throws {
        guard sinkFile >= 0, (200..<300).contains(status), request.url.hasPrefix("http") else { return }
        let expected: Int64?
        if let total = headers["content-range"].flatMap(ContentRange.init)?.total {
            expected = total
        } else if let length = headers["content-length"].flatMap({ Int64($0) }) {
            expected = sinkOffset + length
        } else {
            expected = nil
        }
        var info = stat()
        guard let expected, fstat(sinkFile, &info) == 0, Int64(info.st_size) != expected else { return }
        if Int64(info.st_size) > expected { ftruncate(sinkFile, 0) }
        throw StoreBackupError.transferFailed(
            .connection, label: request.label,
            "the download ended at \(info.st_size) of \(expected) bytes; trying again")
    }

    func reportProgress(sent: Int64, received: Int64) -> Int32 {
        if cancel?.isCancelled == true { return 1 }
        progress?(sent, received)
        return 0
    }
}

private func context(_ pointer: UnsafeMutableRawPointer?) -> TransferContext {
    Unmanaged<TransferContext>.fromOpaque(pointer!).takeUnretainedValue()
}

private let curlReadCallback: sb_curl_data_callback = { buffer, size, count, userdata in
    context(userdata).readBody(into: buffer!, capacity: size * count)
}

private let curlSeekCallback: sb_curl_seek_callback = { userdata, offset, origin in
    guard origin == SEEK_SET else { return 2 }  // CURL_SEEKFUNC_CANTSEEK
    return context(userdata).seekBody(to: Int64(offset)) ? 0 : 1
}

private let curlWriteCallback: sb_curl_data_callback = { buffer, size, count, userdata in
    context(userdata).receive(UnsafeRawBufferPointer(start: buffer, count: size * count))
}

private let curlHeaderCallback: sb_curl_data_callback = { buffer, size, count, userdata in
    let length = size * count
    let line = String(decoding: UnsafeRawBufferPointer(start: buffer, count: length), as: UTF8.self)
    context(userdata).receiveHeader(line)
    return length
}

private let curlProgressCallback: sb_curl_progress_callback = { userdata, _, received, _, sent in
    context(userdata).reportProgress(sent: Int64(sent), received: Int64(received))
}
