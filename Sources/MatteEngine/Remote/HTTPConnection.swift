import CCurl
import Foundation

/// Why a request got no usable answer, as far as the transport can tell.
enum TransportFailure: Error, CustomStringConvertible {
    /// No answer: refused, unresolvable, timed out, reset, closed before or while replying. The server may
    /// come back. `sent`: the request may have reached it (and run); false when no connection was made.
    case unreachable(String, sent: Bool)
    /// TLS refused: the certificate is not trusted, or the handshake failed.
    case tls(String)
    /// The reply is larger than any answer to this request can be.
    case oversized(limit: Int)

    var description: String {
        switch self {
        case let .unreachable(detail, _): return detail
        case let .tls(detail): return "TLS: \(detail)"
        case let .oversized(limit): return "a reply over \(limit) bytes, more than any answer to this request"
        }
    }
}

/// An HTTP reply: its status, its headers (names lowercased) and its body.
struct HTTPReply {
    var status = 0
    var headers: [String: String] = [:]
    var body: [UInt8] = []
}

/// One keep-alive HTTP/1.1 connection (libcurl's easy interface) to a server: requests go one at a
/// time, the connection stays open between them. Bodies are streamed from the caller's buffers, not
/// copied into one; replies are bounded. The bearer token (if any) goes in a header and nowhere else.
final class HTTPConnection {
    /// scheme://host[:port][/path], without a trailing slash.
    let base: String
    private let handle: UnsafeMutableRawPointer
    private let bearer: String?
    private let timeoutMs: Int
    /// libcurl's message about the last failure (it keeps the pointer: allocated, not an array).
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
    /// Bytes that crossed the wire in the last request (request body, reply body).
    private(set) var lastSent = 0, lastReceived = 0

    private static let globalInit: Void = { curl_global_init(Int(CURL_GLOBAL_ALL)) }()

    init(base: String, timeoutMs: Int, caFile: String?, bearer: String?) throws {
        _ = HTTPConnection.globalInit
        guard let handle = curl_easy_init() else { throw TransportFailure.unreachable("libcurl could not make a connection handle", sent: false) }
        self.handle = handle
        self.base = base
        self.bearer = bearer
        self.timeoutMs = timeoutMs
        // (curl copies strings; callbacks get their context per request.)
        mat_curl_set_long(handle, CURLOPT_NOSIGNAL, 1)
        mat_curl_set_long(handle, CURLOPT_TIMEOUT_MS, timeoutMs)
        mat_curl_set_long(handle, CURLOPT_CONNECTTIMEOUT_MS, min(timeoutMs, 3000))
        mat_curl_set_long(handle, CURLOPT_TCP_NODELAY, 1)
        mat_curl_set_long(handle, CURLOPT_TCP_KEEPALIVE, 1)
        mat_curl_set_long(handle, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1)
        mat_curl_set_string(handle, CURLOPT_PROTOCOLS_STR, "http,https")
        mat_curl_set_long(handle, CURLOPT_FOLLOWLOCATION, 0)
        // TLS: the system's CA store unless a file is named; peer and host always verified.
        if let caFile { mat_curl_set_string(handle, CURLOPT_CAINFO, caFile) }
        mat_curl_set_long(handle, CURLOPT_SSL_VERIFYPEER, 1)
        mat_curl_set_long(handle, CURLOPT_SSL_VERIFYHOST, 2)
        errorBuffer[0] = 0
        mat_curl_set_pointer(handle, CURLOPT_ERRORBUFFER, errorBuffer)
        mat_curl_set_callback(handle, CURLOPT_WRITEFUNCTION, { data, size, count, user in
            Unmanaged<ReplySink>.fromOpaque(user!).takeUnretainedValue().append(data, size * count)
        })
        mat_curl_set_callback(handle, CURLOPT_HEADERFUNCTION, { data, size, count, user in
            Unmanaged<ReplySink>.fromOpaque(user!).takeUnretainedValue().header(data, size * count)
        })
        mat_curl_set_callback(handle, CURLOPT_READFUNCTION, { data, size, count, user in
            Unmanaged<BodySource>.fromOpaque(user!).takeUnretainedValue().read(into: data, size * count)
        })
        // (A kept-alive connection that died under a request: libcurl rewinds the body and sends it again.)
        mat_curl_set_seek(handle, { user, offset, origin in
            guard origin == SEEK_SET else { return CURL_SEEKFUNC_CANTSEEK }
            return Unmanaged<BodySource>.fromOpaque(user!).takeUnretainedValue().seek(to: Int(offset)) ? CURL_SEEKFUNC_OK : CURL_SEEKFUNC_FAIL
        })
    }

    deinit {
        curl_easy_cleanup(handle)
        errorBuffer.deallocate()
    }

    func get(_ path: String, limit: Int, timeoutMs: Int? = nil) throws -> HTTPReply {
        mat_curl_set_long(handle, CURLOPT_HTTPGET, 1)
        if let timeoutMs { mat_curl_set_long(handle, CURLOPT_TIMEOUT_MS, timeoutMs) }
        defer { if timeoutMs != nil { mat_curl_set_long(handle, CURLOPT_TIMEOUT_MS, self.timeoutMs) } }
        return try perform(path, headers: [], body: nil, limit: limit)
    }

    /// POSTs `parts` back to back as one body.
    func post(_ path: String, headers: [String], parts: [UnsafeRawBufferPointer], limit: Int, timeoutMs: Int? = nil) throws -> HTTPReply {
        let source = BodySource(parts)
        mat_curl_set_long(handle, CURLOPT_POST, 1)
        mat_curl_set_offset(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(source.total))
        if let timeoutMs { mat_curl_set_long(handle, CURLOPT_TIMEOUT_MS, timeoutMs) }
        defer { if timeoutMs != nil { mat_curl_set_long(handle, CURLOPT_TIMEOUT_MS, self.timeoutMs) } }
        return try perform(path, headers: headers, body: source, limit: limit)
    }

    private func perform(_ path: String, headers: [String], body: BodySource?, limit: Int) throws -> HTTPReply {
        let sink = ReplySink(limit: limit)
        var list: UnsafeMutablePointer<curl_slist>?
        // No "Expect: 100-continue" round trip before a large body.
        for line in headers + ["Expect:"] + (bearer.map { ["Authorization: Bearer \($0)"] } ?? []) {
            list = curl_slist_append(list, line)
        }
        defer { curl_slist_free_all(list) }
        mat_curl_set_headers(handle, list)
        mat_curl_set_string(handle, CURLOPT_URL, base + path)
        let sinkPointer = Unmanaged.passUnretained(sink).toOpaque()
        mat_curl_set_pointer(handle, CURLOPT_WRITEDATA, sinkPointer)
        mat_curl_set_pointer(handle, CURLOPT_HEADERDATA, sinkPointer)
        if let body {
            mat_curl_set_pointer(handle, CURLOPT_READDATA, Unmanaged.passUnretained(body).toOpaque())
            mat_curl_set_pointer(handle, CURLOPT_SEEKDATA, Unmanaged.passUnretained(body).toOpaque())
        }
        errorBuffer[0] = 0
        let code = withExtendedLifetime((sink, body)) { curl_easy_perform(handle) }
        lastSent = body?.total ?? 0
        lastReceived = sink.reply.body.count
        if code != CURLE_OK { throw failure(code, sink: sink) }
        var status = 0
        mat_curl_get_long(handle, CURLINFO_RESPONSE_CODE, &status)
        sink.reply.status = status
        return sink.reply
    }

    private func failure(_ code: CURLcode, sink: ReplySink) -> TransportFailure {
        let detail = errorBuffer[0] != 0 ? String(cString: errorBuffer) : String(cString: curl_easy_strerror(code))
        switch code {
        case CURLE_WRITE_ERROR where sink.overflowed:
            return .oversized(limit: sink.limit)
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CERTPROBLEM:
            return .tls(detail)
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY:
            return .unreachable(detail, sent: false)
        default:
            // (A reply cut short, CURLE_PARTIAL_FILE, is a server that died while answering.)
            return .unreachable(detail, sent: true)
        }
    }
}

/// Where a reply goes: its headers and a body of at most `limit` bytes.
final class ReplySink {
    let limit: Int
    var reply = HTTPReply()
    var overflowed = false

    init(limit: Int) { self.limit = limit }

    func append(_ data: UnsafeMutablePointer<CChar>?, _ count: Int) -> Int {
        guard let data, count > 0 else { return 0 }
        if reply.body.count + count > limit {
            overflowed = true
            return 0  // libcurl stops: CURLE_WRITE_ERROR
        }
        data.withMemoryRebound(to: UInt8.self, capacity: count) { reply.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: count)) }
        return count
    }

    func header(_ data: UnsafeMutablePointer<CChar>?, _ count: Int) -> Int {
        guard let data else { return 0 }
        let line = String(decoding: UnsafeRawBufferPointer(start: data, count: count), as: UTF8.self)
        // A new status line (a 100 Continue before the real one) starts the headers over.
        if line.hasPrefix("HTTP/") { reply.headers = [:] }
        if let colon = line.firstIndex(of: ":") {
            let name = line[..<colon].trimmingCharacters(in: .whitespaces).lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
            reply.headers[name] = value
        }
        return count
    }
}

/// A request body read from several buffers in turn (no copy into one).
private final class BodySource {
    private let parts: [UnsafeRawBufferPointer]
    private var part = 0, offset = 0
    let total: Int

    init(_ parts: [UnsafeRawBufferPointer]) {
        self.parts = parts.filter { $0.count > 0 }
        total = parts.reduce(0) { $0 + $1.count }
    }

    /// Back to byte `position` of the body (libcurl sends it again on a new connection).
    func seek(to position: Int) -> Bool {
        guard position >= 0, position <= total else { return false }
        var left = position
        part = 0
        while part < parts.count, left >= parts[part].count {
            left -= parts[part].count
            part += 1
        }
        offset = left
        return true
    }

    func read(into destination: UnsafeMutablePointer<CChar>?, _ capacity: Int) -> Int {
        guard let destination else { return 0 }
        var written = 0
        while written < capacity, part < parts.count {
            let source = parts[part]
            let count = min(capacity - written, source.count - offset)
            UnsafeMutableRawPointer(destination + written).copyMemory(from: source.baseAddress! + offset, byteCount: count)
            written += count
            offset += count
            if offset == source.count { part += 1; offset = 0 }
        }
        return written
    }
}
