import CCurl
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Backups in a folder on an SSH server, over SFTP (libcurl with libssh2).
///
/// `sftp://USER@HOST[:PORT]/PATH`, PATH absolute on the server; without USER, the local
/// user name (as ssh does). Authentication is by key only: `--ssh-key`, else
/// `~/.ssh/id_ed25519`, else `~/.ssh/id_rsa` (with `KEY.pub` beside it when present;
/// keys must not have a passphrase). The server's host key must already be in
/// `--known-hosts` or `~/.ssh/known_hosts`: an unknown or changed key is refused, never
/// accepted silently.
///
/// Publishing: the archive goes up under a hidden temporary name in the folder
/// (`.storebackup-tmp-<pid>-<uuid>.zip`), then an SFTP `rename` gives it its name. SFTP
/// version 3 (what libssh2 speaks) defines rename to fail when the target exists, and
/// OpenSSH implements it with link()+unlink(), so an existing backup is not replaced.
struct SFTPDestination: BlockingDestination {
    let threadName = "storebackup-sftp"

    /// The SSH user.
    let user: String
    /// Host as written in URLs (IPv6 addresses in brackets).
    let host: String
    /// The SSH port (22 unless the URL says).
    let port: Int
    /// Absolute folder path on the server, without a trailing slash ("/" for the root).
    let folder: String
    /// The private key used to log in.
    let privateKeyFile: String
    /// Its `.pub` file, when there is one.
    let publicKeyFile: String?
    /// The known_hosts file the server's host key must be in.
    let knownHostsFile: String
    let transport: RetryingTransport
    /// One attempt per request: cleanup after a failure must not add a round of retries.
    let cleanupTransport: RetryingTransport

    static let temporaryPrefix = ".storebackup-tmp-"

    /// Validates an `sftp://` URL and finds the key and known_hosts files.
    static func make(url: String, options: DestinationOptions) throws -> SFTPDestination {
        guard let parts = RemoteURL(url), parts.scheme == "sftp", parts.hasPath else {
            throw StoreBackupError.invalidDestination(
                url: RemoteURL.redacted(url), reason: "expected sftp://USER@HOST[:PORT]/ABSOLUTE/PATH")
        }
        if parts.hasPassword {
            throw StoreBackupError.invalidDestination(
                url: parts.display, reason: "sftp:// uses SSH keys only; remove the password from the URL", remedy: .giveSSHKey)
        }
        let user = parts.user ?? Self.localUserName(options.environment)
        guard !user.isEmpty else {
            throw StoreBackupError.invalidDestination(url: parts.display, reason: "no user name: write sftp://USER@HOST/PATH")
        }
        let port = parts.port ?? 22
        let folder = "/" + parts.segments.joined(separator: "/")
        let display = "sftp://\(user)@\(parts.host)\(port == 22 ? "" : ":\(port)")\(folder)"
        let home = options.home

        let key: String
        if let explicit = options.sshKey {
            key = FileSystem.absolutePath(explicit)
            guard FileSystem.fileExists(key) else {
                throw StoreBackupError.invalidDestination(url: display, reason: "the SSH key \(key) does not exist")
            }
        } else {
            let candidates = [home + "/.ssh/id_ed25519", home + "/.ssh/id_rsa"]
            guard let found = candidates.first(where: FileSystem.fileExists) else {
                throw StoreBackupError.invalidDestination(
                    url: display, reason: "no SSH key was given and \(candidates[0]) does not exist (create it with ssh-keygen -t ed25519)",
                    remedy: .giveSSHKey)
            }
            key = found
        }
        guard access(key, R_OK) == 0 else {
            throw StoreBackupError.invalidDestination(url: display, reason: "the SSH key \(key) cannot be read")
        }
        let publicKey = FileSystem.fileExists(key + ".pub") ? key + ".pub" : nil

        let knownHosts = FileSystem.absolutePath(options.knownHosts ?? home + "/.ssh/known_hosts")
        guard FileSystem.fileExists(knownHosts) else {
            throw StoreBackupError.invalidDestination(
                url: display,
                reason: "there is no known_hosts file at \(knownHosts), so the server's identity cannot be checked; "
                    + "add its host key first: \(keyscanCommand(host: parts.host, port: port, knownHosts: knownHosts)) "
                    + "(and compare the fingerprint with the one the server's administrator gives you)")
        }
        return SFTPDestination(
            user: user, host: parts.host, port: port, folder: folder, privateKeyFile: key, publicKeyFile: publicKey,
            knownHostsFile: knownHosts,
            transport: RetryingTransport(options: options.transport, policy: options.retry, logger: options.logger),
            cleanupTransport: RetryingTransport(options: options.transport, policy: RetryPolicy(requestAttempts: 1, operationAttempts: 1)))
    }

    static func localUserName(_ environment: [String: String]) -> String {
        if let entry = getpwuid(getuid()), let name = entry.pointee.pw_name { return String(cString: name) }
        return environment["USER"] ?? ""
    }

    static func keyscanCommand(host: String, port: Int, knownHosts: String) -> String {
        let bareHost = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        return "ssh-keyscan \(port == 22 ? "" : "-p \(port) ")\(bareHost) >> \(knownHosts)"
    }

    var displayName: String { "sftp://\(user)@\(host)\(port == 22 ? "" : ":\(port)")\(folder)" }

    private func path(of name: String) -> String { (folder == "/" ? "" : folder) + "/" + name }

    /// libcurl decodes the URL's path; the folder URL ends in "/" (a listing).
    private func url(path: String) -> String { "sftp://\(host):\(port)" + URLPath.encode(path) }
    private var folderURL: String { url(path: folder == "/" ? "/" : folder + "/") }

    /// A path as an argument of a libcurl sftp quote command: in double quotes, with
    /// backslash before `"`, `'` and `\` (libcurl's quote parser).
    static func quoted(_ path: String) -> String {
        var text = "\""
        for character in path {
            if character == "\"" || character == "'" || character == "\\" { text.append("\\") }
            text.append(character)
        }
        return text + "\""
    }

    private func request(_ method: String, _ url: String, label: String) -> TransferRequest {
        var request = TransferRequest(method: method, url: url, label: label)
        request.credentials = .sshKey(
            user: user, privateKeyFile: privateKeyFile, publicKeyFile: publicKeyFile,
            knownHostsFile: knownHostsFile)
        return request
    }

    // MARK: list

    func listBackups(cancel: CancellationFlag) throws -> [BackupListing] {
        try list(cancel: cancel).map { entry in
            BackupListing(
                name: entry.name, size: entry.size,
                date: BackupName.date(of: entry.name) ?? Date(timeIntervalSince1970: 0), modified: nil)
        }
    }

    struct Entry: Equatable {
        var name: String
        var size: Int64
        /// From the listing's date columns, when asked for (``parseLongListing(_:keep:dated:)``).
        var modified: Date? = nil
    }

    /// The backups in the folder (regular files with backup names); empty when the folder
    /// does not exist.
    ///
    /// Why the long listing: it is one request and carries each size. The alternative,
    /// names only (CURLOPT_DIRLISTONLY) plus a size per file, would cost one SSH connection
    /// per backup (every request here is its own session), and libcurl's sftp "HEAD" does not
    /// report a size anyway. The long lines are the server's `ls -l`-style `longname`
    /// (SFTP v3 recommends that format; OpenSSH writes it), read field by field so names
    /// keep their exact spaces. Should a server write something else, the names-only
    /// listing is used instead (sizes then unknown, 0) rather than silently showing nothing.
    func list(cancel: CancellationFlag?, keep: (String) -> Bool = BackupName.isBackup, dated: Bool = false) throws -> [Entry] {
        var get = request("GET", folderURL, label: displayName)
        get.sink = .memory(limit: 64 << 20)
        let response: TransferResponse
        do {
            response = try perform(get, cancel: cancel)
        } catch StoreBackupError.transfer(let failure) where failure.kind == .notFound {
            return []
        }
        let text = String(decoding: response.body, as: UTF8.self)
        let parsed = Self.parseLongListing(text, keep: keep, dated: dated)
        guard parsed.unparsed > 0 else { return parsed.entries }

        var namesOnly = request("GET", folderURL, label: displayName)
        namesOnly.directoryListOnly = true
        namesOnly.sink = .memory(limit: 64 << 20)
        let names = String(decoding: try perform(namesOnly, cancel: cancel).body, as: UTF8.self)
        var entries = parsed.entries
        let known = Set(entries.map(\.name))
        for line in Self.lines(names) {
            let name = String(line)
            if keep(name) && !known.contains(name) { entries.append(Entry(name: name, size: 0)) }
        }
        return entries
    }

    /// Parses `ls -l`-style lines: permissions, links, owner, group, size, month, day,
    /// time or year, then one space and the name (which may hold any spaces). Keeps regular
    /// files with backup names; counts the lines it could not read.
    static func parseLongListing(
        _ text: String, keep: (String) -> Bool = BackupName.isBackup,
        dated: Bool = false
    ) -> (entries: [Entry], unparsed: Int) {
        var entries: [Entry] = []
        var unparsed = 0
        for line in lines(text) {
            var fields: [Substring] = []
            var index = line.startIndex
            while fields.count < 8 {
                while index < line.endIndex, line[index] == " " || line[index] == "\t" { index = line.index(after: index) }
                let start = index
                while index < line.endIndex, line[index] != " " && line[index] != "\t" { index = line.index(after: index) }
                guard start < index else { break }
                fields.append(line[start..<index])
            }
            let permissions = fields.first ?? ""
            guard fields.count == 8, index < line.endIndex, permissions.count >= 10,
                let type = permissions.first, "-dlcbps".contains(type), let size = Int64(fields[4])
            else {
                unparsed += 1
                continue
            }
            let name = String(line[line.index(after: index)...])  // exactly one separator
            guard type == "-", keep(name) else { continue }
            entries.append(
                Entry(
                    name: name, size: size,
                    modified: dated ? Self.listingDate(month: fields[5], day: fields[6], timeOrYear: fields[7]) : nil))
        }
        return (entries, unparsed)
    }

    /// The date of an `ls -l` line (`Nov 22 19:11` in the last half year, else `Jan  3  2024`),
    /// in UTC: the server's time zone is unknown, so it is good to within a day.
    static func listingDate(month: Substring, day: Substring, timeOrYear: Substring, now: Date = Date()) -> Date? {
        let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
        guard let monthIndex = months.firstIndex(of: month.lowercased()), let dayNumber = Int(day) else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        var parts = DateComponents(month: monthIndex + 1, day: dayNumber)
        if let colon = timeOrYear.firstIndex(of: ":") {
            parts.hour = Int(timeOrYear[..<colon])
            parts.minute = Int(timeOrYear[timeOrYear.index(after: colon)...])
            parts.year = calendar.component(.year, from: now)
            // Within the last half year: a date "in the future" belongs to last year.
            if let date = calendar.date(from: parts), date > now.addingTimeInterval(86_400) { parts.year! -= 1 }
        } else {
            guard let year = Int(timeOrYear) else { return nil }
            parts.year = year
        }
        return calendar.date(from: parts)
    }

    /// Lines ending in LF or CRLF (in Swift, "\r\n" is one Character, so splitting on "\n" alone misses it).
    static func lines(_ text: String) -> [Substring] {
        text.split(omittingEmptySubsequences: true, whereSeparator: { $0 == "\n" || $0 == "\r\n" })
    }

    // MARK: upload

    func upload(file: String, as name: String, progress: ProgressHandler?, cancel: CancellationFlag) throws {
        try BackupName.validate(name)
        let size = Int64(try FileSystem.lstatInfo(file).st_size)
        // Checked first for a clear message without uploading in vain. The rename below
        // is what really refuses to replace a backup (SFTP v3 rename fails on an existing
        // target); a server that ignored that rule could still, in the moment between
        // this check and the rename, let a concurrent writer's backup of the same name
        // be replaced. Names carry the second they were made, so that needs two stores
        // backing up into one folder in the same second on such a server.
        if try list(cancel: cancel).contains(where: { $0.name == name }) {
            throw StoreBackupError.backupExists(name: name, destination: displayName)
        }
        let temporary = path(of: Self.temporaryPrefix + "\(getpid())-\(UUID().uuidString).zip")
        var put = request("PUT", url(path: temporary), label: "\(displayName)/\(name)")
        put.body = .file(path: file, offset: 0, length: size)
        put.createMissingDirectories = true
        do {
            _ = try perform(put, cancel: cancel) { sent, _ in
                progress?(BackupProgress(phase: .uploading, bytesDone: sent, bytesTotal: size))
            }
            try rename(temporary, to: name, size: size, cancel: cancel)
        } catch {
            // Best effort, and even when cancelled: never leave the temporary behind.
            _ = try? remove(temporary, cancel: nil, once: true)
            throw error
        }
        // SSH protects every byte on the way; what remains to check is that the file
        // under the name is complete.
        let published = try list(cancel: cancel).first(where: { $0.name == name })
        guard let published, published.size == size || published.size == 0 else {
            _ = try? remove(path(of: name), cancel: nil, once: true)
            throw StoreBackupError.transferFailed(
                .transient, label: displayName,
                "\(name) has \(published?.size ?? 0) bytes on the server, "
                    + "\(size) were sent; removed it, trying again")
        }
        progress?(BackupProgress(phase: .uploading, bytesDone: size, bytesTotal: size))
    }

    /// Renames the uploaded temporary to `name` in a request of its own, so a connection
    /// that dies around it is retried without sending the data again. When the rename's
    /// outcome is unclear (its answer was lost: libcurl reports the cut as a failed quote
    /// command, a retry no longer finds the temporary), the folder is looked at: the
    /// temporary gone and the name holding a file of our size means our rename went
    /// through, once; the temporary still there beside the name means someone else's backup.
    private func rename(_ temporary: String, to name: String, size: Int64, cancel: CancellationFlag) throws {
        var rename = request("HEAD", url(path: temporary), label: "\(displayName)/\(name)")
        rename.postQuote = ["rename \(Self.quoted(temporary)) \(Self.quoted(path(of: name)))"]
        do {
            _ = try perform(rename, cancel: cancel)
        } catch StoreBackupError.transfer(let error)
            where error.kind == .notFound || error.isRetryable
            || error.curlCode == Int(CURLE_QUOTE_ERROR.rawValue)
        {
            let temporaryName = String(temporary.split(separator: "/").last ?? "")
            let entries = try list(cancel: cancel, keep: { $0 == name || $0 == temporaryName })
            let published = entries.first(where: { $0.name == name })
            let temporaryLeft = entries.contains(where: { $0.name == temporaryName })
            switch (temporaryLeft, published) {
            case (false, let published?) where published.size == size:
                return
            case (true, _?), (false, _?):
                // The rename was refused because the name was taken meanwhile.
                throw StoreBackupError.backupExists(name: name, destination: displayName)
            case (false, nil):
                throw StoreBackupError.transferFailed(
                    .transient, label: displayName, "the uploaded archive vanished before it was renamed to \"\(name)\"; trying again")
            case (true, nil) where error.curlCode == Int(CURLE_QUOTE_ERROR.rawValue):
                throw StoreBackupError.transferFailed(
                    .other, label: displayName,
                    "the server refused to rename the uploaded archive "
                        + "to \"\(name)\" (is there a folder or link of that name?)", curlCode: error.curlCode)
            case (true, nil):
                throw StoreBackupError.transfer(error)
            }
        }
    }

    /// Lists the folder (connection, key, folder), then writes and removes an empty
    /// temporary (the folder is writable, created when missing).
    func preflight(cancel: CancellationFlag) throws {
        _ = try list(cancel: cancel)
        let probe = path(of: Self.temporaryPrefix + "\(getpid())-\(UUID().uuidString)-preflight")
        var put = request("PUT", url(path: probe), label: displayName)
        put.body = .bytes(Data())
        put.createMissingDirectories = true
        put.postQuote = ["rm \(Self.quoted(probe))"]
        _ = try perform(put, cancel: cancel)
    }

    /// Temporaries of uploads that never finished, older than `age` seconds.
    func staleUploads(olderThan age: Double, cancel: CancellationFlag) throws -> [StaleUpload] {
        let cutoff = Date().addingTimeInterval(-age)
        return try list(cancel: cancel, keep: { $0.hasPrefix(Self.temporaryPrefix) }, dated: true).compactMap { entry in
            if age > 0, let modified = entry.modified, modified > cutoff { return nil }
            return StaleUpload(name: entry.name, started: entry.modified)
        }
    }

    /// Removes a stale temporary.
    func removeStaleUpload(_ upload: StaleUpload, cancel: CancellationFlag) throws {
        guard upload.name.hasPrefix(Self.temporaryPrefix), !upload.name.contains("/") else { return }
        do {
            try remove(path(of: upload.name), cancel: cancel)
        } catch StoreBackupError.transfer(let failure) where failure.kind == .notFound {}
    }

    /// Removes a remote file: opens it without transferring (so a missing file is
    /// CURLE_REMOTE_FILE_NOT_FOUND), then `rm` as a post-quote command.
    /// `once`: a single attempt (cleanup after a failure must not add a round of retries).
    private func remove(_ remotePath: String, cancel: CancellationFlag?, once: Bool = false) throws {
        var head = request("HEAD", url(path: remotePath), label: displayName)
        head.postQuote = ["rm \(Self.quoted(remotePath))"]
        _ = try perform(head, cancel: cancel, using: once ? cleanupTransport : transport)
    }

    // MARK: download and delete

    func download(_ name: String, to file: String, progress: ProgressHandler?, cancel: CancellationFlag) throws {
        try BackupName.validate(name)
        var get = request("GET", url(path: path(of: name)), label: "\(displayName)/\(name)")
        get.sink = .file(path: file, offset: 0)
        // A file left by an earlier attempt: continue it (CURLOPT_RESUME_FROM_LARGE).
        get = RetryingTransport.resumed(get)
        let start: Int64 = if case .file(_, let offset) = get.sink { offset } else { 0 }
        do {
            _ = try perform(get, cancel: cancel) { _, received in
                progress?(BackupProgress(phase: .downloading, bytesDone: start + received, bytesTotal: 0))
            }
        } catch StoreBackupError.transfer(let failure) where failure.kind == .notFound {
            throw StoreBackupError.backupNotFound(name: name, destination: displayName)
        }
    }

    /// A read of the file from an offset (`CURLOPT_RANGE`; SFTP reads at any offset).
    /// Each read is a connection of its own (key exchange, authentication): pieces of a
    /// whole download ask for the most a read may.
    func rangeReader(of name: String, size: Int64) -> BackupRangeReader? {
        guard (try? BackupName.validate(name)) != nil else { return nil }
        return BackupRangeReader(size: size, pieceBytes: RangedRead.maxRequestBytes) { range, target, cancel in
            let label = "\(displayName)/\(name)"
            let get = try RangedRead.request(
                request("GET", url(path: path(of: name)), label: label), range: range, size: size, into: target)
            do {
                let response = try RangedRead.perform(get) { try perform($0, cancel: cancel) }
                return try RangedRead.bytes(of: response, range: range, size: size, label: label, target: target)
            } catch StoreBackupError.transfer(let failure) where failure.kind == .notFound {
                throw StoreBackupError.backupNotFound(name: name, destination: displayName)
            }
        }
    }

    func delete(_ name: String, cancel: CancellationFlag) throws {
        try BackupName.validate(name)
        do {
            try remove(path(of: name), cancel: cancel)
        } catch StoreBackupError.transfer(let failure) where failure.kind == .notFound {
            throw StoreBackupError.backupNotFound(name: name, destination: displayName)
        }
    }

    // MARK: errors

    private var hostAndPort: String { "\(host):\(port)" }

    /// Performs a request, turning transport failures into messages that name the
    /// destination and say what to do. The kind and the libcurl code are kept.
    private func perform(
        _ request: TransferRequest, cancel: CancellationFlag?, using transport: RetryingTransport? = nil,
        progress: (@Sendable (Int64, Int64) -> Void)? = nil
    ) throws -> TransferResponse {
        do {
            return try (transport ?? self.transport).perform(request, cancel: cancel, progress: progress)
        } catch StoreBackupError.transfer(let error) {
            // libcurl's words for its code, kept apart from the request label by the transport.
            let curlText = error.detail
            var mapped = error
            switch error.kind {
            case .hostKey:
                mapped.message =
                    "\(displayName): the host key of \(hostAndPort) is not in \(knownHostsFile) or does not match it; "
                    + "refusing to connect. If this is a new server, add its key with "
                    + "\(Self.keyscanCommand(host: host, port: port, knownHosts: knownHostsFile)) after checking its fingerprint; "
                    + "if the key changed, find out why before trusting the new one"
            case .authentication:
                mapped.message =
                    "\(displayName): the server refused the key \(privateKeyFile) for user \(user); "
                    + "check that its public key is in ~\(user)/.ssh/authorized_keys on the server and that the key has no passphrase"
                    + ": \(curlText)"
            case .connection
            where error.curlCode == Int(CURLE_COULDNT_CONNECT.rawValue) || error.curlCode == Int(CURLE_COULDNT_RESOLVE_HOST.rawValue):
                mapped.message =
                    "\(displayName): cannot reach \(hostAndPort); check the host, the port and that the SSH server is running"
                    + ": \(curlText)"
            case .timeout:
                mapped.message = "\(displayName): \(hostAndPort) did not answer in time: \(curlText)"
            default:
                mapped.message = "\(displayName): \(curlText)"
            }
            throw StoreBackupError.transfer(mapped)
        }
    }
}
