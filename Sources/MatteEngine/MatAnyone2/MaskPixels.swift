/// A decoded seed mask's 8-bit plane, packed to `width × height` bytes (rows `stride` apart from
/// `offset` into the mapped bytes), with every bound checked first: what a decoder hands over is
/// outside input (fuzzed: Fuzz/mask).
public enum MaskPixels {
    public struct Unusable: Error, CustomStringConvertible {
        public let description: String
    }

    /// The largest mask accepted (a 16K square): beyond, a mask is refused before any allocation.
    public static let maxPixels = 16384 * 16384

    public static func pack(_ plane: UnsafeRawBufferPointer, offset: Int, width: Int, height: Int, stride: Int) throws -> [UInt8] {
        guard width > 0, height > 0 else { throw Unusable(description: "it is \(width)x\(height) pixels") }
        guard width <= maxPixels / height else {
            throw Unusable(description: "it is \(width)x\(height) pixels, over the \(maxPixels) accepted")
        }
        guard stride >= width else { throw Unusable(description: "its rows are \(stride) bytes apart, fewer than its \(width) pixels") }
        // (stride × (height − 1) + width, overflow-checked: a stride from outside may be anything)
        let (rows, o1) = stride.multipliedReportingOverflow(by: height - 1)
        let (span, o2) = rows.addingReportingOverflow(width)
        let (end, o3) = span.addingReportingOverflow(offset)
        guard offset >= 0, !o1, !o2, !o3, end <= plane.count, let base = plane.baseAddress else {
            throw Unusable(description: "its \(height) rows of stride \(stride) from byte \(offset) need more than the "
                           + "\(plane.count) bytes mapped")
        }
        var pixels = [UInt8](repeating: 0, count: width * height)
        pixels.withUnsafeMutableBytes { out in
            for y in 0..<height {
                (out.baseAddress! + y * width).copyMemory(from: base + offset + y * stride, byteCount: width)
            }
        }
        return pixels
    }
}
