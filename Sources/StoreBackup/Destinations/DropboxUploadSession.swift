import Foundation

/// One upload session for an archive too large for a single `/2/files/upload`:
/// `start` with the first chunk, `append_v2` for the middle ones, `finish` with the last
/// chunk and the commit. Each chunk is streamed from the file by libcurl, so memory stays
/// at one read buffer whatever the archive's size.
///
/// When Dropbox has a different amount of data than we think (an append whose answer was
/// lost and that the transport sent again, or data it dropped), it answers
/// `incorrect_offset` with `correct_offset`; the upload continues from there.
struct DropboxUploadSession {
    let destination: DropboxDestination
    let file: String
    let size: Int64
    let name: String
    let cancel: CancellationFlag
    let progress: ProgressHandler?

    private var label: String { "\(destination.displayName)/\(name)" }

    func run() throws -> DropboxDestination.Committed {
        let chunk = destination.chunkSize
        var hashes = DropboxFileHashTracker(file: file)
        var offset: Int64 = 0
        let firstLength = min(chunk, size)
        let started = try send("files/upload_session/start", ["close": false], offset: 0, length: firstLength, hashes: &hashes)
        try destination.check(started, context: "start uploading \(name)")
        guard let sessionID = DropboxAPI.object(started.body)?["session_id"] as? String else {
            throw StoreBackupError.destination(destination: destination.displayName, reason: "Dropbox did not return an upload session id")
        }
        offset = firstLength
        report(offset)

        var corrections = 0
        while true {
            try cancel.throwIfCancelled()
            let cursor: [String: Any] = ["session_id": sessionID, "offset": offset]
            let remaining = size - offset
            if remaining > chunk {
                let response = try send(
                    "files/upload_session/append_v2", ["cursor": cursor, "close": false],
                    offset: offset, length: chunk, hashes: &hashes)
                if let corrected = try correctedOffset(response, corrections: &corrections) {
                    offset = corrected
                    continue
                }
                try destination.check(response, context: "upload \(name)")
                offset += chunk
                report(offset)
                continue
            }
            let commit: [String: Any] = ["path": destination.path(of: name), "mode": "add", "autorename": false, "mute": true]
            let response = try send(
                "files/upload_session/finish", ["cursor": cursor, "commit": commit],
                offset: offset, length: remaining, hashes: &hashes)
            if let corrected = try correctedOffset(response, corrections: &corrections) {
                offset = corrected
                continue
            }
            let localHash = try hashes.finish(size: size)
            if response.status == 409, let error = DropboxRouteError(response.body), error.has("lookup_failed"), error.has("not_found") {
                // The session is gone: a finish whose answer was lost may have committed it.
                if let existing = try destination.metadata(of: name, cancel: cancel),
                    existing["content_hash"] as? String == localHash
                {
                    let data = try JSONSerialization.data(withJSONObject: existing)
                    return DropboxDestination.Committed(metadata: data, localHash: localHash)
                }
                throw StoreBackupError.destination(
                    destination: destination.displayName,
                    reason: "the upload session of \"\(name)\" expired or was lost; try again")
            }
            if let earlier = try destination.committedEarlier(response, name: name, localHash: localHash, cancel: cancel) { return earlier }
            try destination.checkCommit(response, name: name, context: "upload \(name)")
            return DropboxDestination.Committed(metadata: response.body, localHash: localHash)
        }
    }

    /// Sends `[offset, offset + length)` of the file to a session route, with that
    /// slice's content hash so Dropbox refuses it if it arrives damaged.
    private func send(
        _ route: String, _ argument: [String: Any], offset: Int64, length: Int64,
        hashes: inout DropboxFileHashTracker
    ) throws -> TransferResponse {
        var argument = argument
        let sliceHash = try hashes.hashSlice(offset: offset, length: length)
        if length > 0 { argument["content_hash"] = sliceHash }
        let progress = self.progress, size = self.size
        return try destination.content(
            route, argument, body: .file(path: file, offset: offset, length: length),
            label: label, cancel: cancel
        ) { sent, _ in
            progress?(BackupProgress(phase: .uploading, bytesDone: min(offset + sent, size), bytesTotal: size))
        }
    }

    /// The offset to continue from when Dropbox answered `incorrect_offset`, else nil.
    private func correctedOffset(_ response: TransferResponse, corrections: inout Int) throws -> Int64? {
        guard response.status == 409, let error = DropboxRouteError(response.body), error.has("incorrect_offset") else { return nil }
        guard let correct = error.correctOffset, (0...size).contains(correct) else {
            throw StoreBackupError.destination(
                destination: destination.displayName,
                reason: "Dropbox reported an impossible upload offset (\(error.summary))")
        }
        corrections += 1
        guard corrections <= DropboxDestination.maximumOffsetCorrections else {
            throw StoreBackupError.destination(
                destination: destination.displayName,
                reason: "the upload of \"\(name)\" kept losing its place (incorrect_offset \(corrections) times); try again")
        }
        return correct
    }

    private func report(_ offset: Int64) {
        progress?(BackupProgress(phase: .uploading, bytesDone: offset, bytesTotal: size))
    }
}
