import Foundation

/// Image views and the separable resampling used on both sides of the models: the frame down to the
/// model's input, the model's alpha up to the frame. Downscaling averages the covered source area
/// (like OpenCV's INTER_AREA, no aliasing on 1080p → 256); upscaling is bilinear on pixel centres.

/// A borrowed BGRA frame (rows may be padded: `stride` ≥ 4·width).
public struct BGRAImage {
    public let base: UnsafePointer<UInt8>
    public let width: Int
    public let height: Int
    public let stride: Int
    public init(base: UnsafePointer<UInt8>, width: Int, height: Int, stride: Int) {
        self.base = base
        self.width = width
        self.height = height
        self.stride = stride
    }
}

/// A borrowed 8-bit single-channel plane.
public struct GrayImage {
    public let base: UnsafeMutablePointer<UInt8>
    public let width: Int
    public let height: Int
    public let stride: Int
    public init(base: UnsafeMutablePointer<UInt8>, width: Int, height: Int, stride: Int) {
        self.base = base
        self.width = width
        self.height = height
        self.stride = stride
    }
}

/// For one axis: for each output index, `tapCount` (source index, weight) pairs.
struct AxisTaps {
    let outputCount: Int
    let tapCount: Int
    let index: [Int]
    let weight: [Float]

    init(source: Int, output: Int) {
        precondition(source > 0 && output > 0)
        outputCount = output
        let scale = Double(source) / Double(output)
        var perOutput: [[(Int, Float)]] = []
        perOutput.reserveCapacity(output)
        if scale > 1 {
            // Area: output o covers [o·scale, (o+1)·scale) of the source.
            for o in 0..<output {
                let start = Double(o) * scale
                let end = min(Double(o + 1) * scale, Double(source))
                var taps: [(Int, Float)] = []
                var s = Int(start.rounded(.down))
                while Double(s) < end - 1e-9 {
                    let covered = min(end, Double(s + 1)) - max(start, Double(s))
                    if covered > 1e-9 { taps.append((min(s, source - 1), Float(covered / (end - start)))) }
                    s += 1
                }
                perOutput.append(taps)
            }
        } else {
            // Bilinear with half-pixel centres, edges clamped.
            for o in 0..<output {
                let x = (Double(o) + 0.5) * scale - 0.5
                let x0 = Int(x.rounded(.down))
                let fraction = Float(x - Double(x0))
                let left = min(max(x0, 0), source - 1)
                let right = min(max(x0 + 1, 0), source - 1)
                perOutput.append([(left, 1 - fraction), (right, fraction)])
            }
        }
        tapCount = perOutput.map(\.count).max() ?? 1
        var index = [Int](repeating: 0, count: output * tapCount)
        var weight = [Float](repeating: 0, count: output * tapCount)
        for (o, taps) in perOutput.enumerated() {
            for (t, tap) in taps.enumerated() {
                index[o * tapCount + t] = tap.0
                weight[o * tapCount + t] = tap.1
            }
            // Padding taps repeat a valid index with weight 0.
            for t in taps.count..<tapCount { index[o * tapCount + t] = taps.last?.0 ?? 0 }
        }
        self.index = index
        self.weight = weight
    }
}

/// Resamples between two fixed sizes; scratch rows are allocated once and reused per frame.
public final class Resampler {
    public let sourceWidth: Int, sourceHeight: Int
    public let targetWidth: Int, targetHeight: Int
    let horizontal: AxisTaps
    let vertical: AxisTaps
    private var row: [Float]
    private var pixelRow: [SIMD4<Float>] = []
    private var expanded: [Float] = []

    public init(sourceWidth: Int, sourceHeight: Int, targetWidth: Int, targetHeight: Int) {
        self.sourceWidth = sourceWidth
        self.sourceHeight = sourceHeight
        self.targetWidth = targetWidth
        self.targetHeight = targetHeight
        horizontal = AxisTaps(source: sourceWidth, output: targetWidth)
        vertical = AxisTaps(source: sourceHeight, output: targetHeight)
        row = []
    }

    /// BGRA bytes → three float planes (R, G, B order, each `planeStride` apart, rows `rowStride`
    /// apart, element step `pixelStep`), values scaled by `scale` (1/255 gives [0, 1]).
    /// NCHW: pixelStep 1, planeStride W·H. NHWC: pixelStep 3, planeStride 1.
    /// Vertical pass first, one BGRA pixel as one 4-lane vector, so each source row is read once per tap.
    public func bgraToRGB(_ image: BGRAImage, into destination: UnsafeMutablePointer<Float>,
                          pixelStep: Int, rowStride: Int, planeStride: Int, scale: Float = 1.0 / 255.0) {
        precondition(image.width == sourceWidth && image.height == sourceHeight)
        let width = sourceWidth
        let hTaps = horizontal.tapCount, vTaps = vertical.tapCount
        let lanes = Resampler.lanes(work: sourceWidth * sourceHeight)
        if pixelRow.count != width * lanes { pixelRow = [SIMD4<Float>](repeating: .zero, count: width * lanes) }
        horizontal.index.withUnsafeBufferPointer { hIndex in
        horizontal.weight.withUnsafeBufferPointer { hWeight in
        vertical.index.withUnsafeBufferPointer { vIndex in
        vertical.weight.withUnsafeBufferPointer { vWeight in
        pixelRow.withUnsafeMutableBufferPointer { accumulators in
            Resampler.forEachSlice(of: targetHeight, lanes: lanes) { rows, lane in
                let acc = accumulators.baseAddress! + lane * width
                for y in rows {
                    acc.update(repeating: .zero, count: width)
                    for t in 0..<vTaps {
                        let w = vWeight[y * vTaps + t]
                        if w == 0 { continue }
                        let source = UnsafeRawPointer(image.base + vIndex[y * vTaps + t] * image.stride)
                        for x in 0..<width {
                            let pixel = source.loadUnaligned(fromByteOffset: 4 * x, as: SIMD4<UInt8>.self)
                            acc[x] += w * SIMD4<Float>(SIMD4<Int32>(truncatingIfNeeded: pixel))
                        }
                    }
                    let out = destination + y * rowStride
                    for x in 0..<targetWidth {
                        var sum = SIMD4<Float>.zero
                        for t in 0..<hTaps { sum += hWeight[x * hTaps + t] * acc[hIndex[x * hTaps + t]] }
                        sum *= scale
                        let o = out + x * pixelStep
                        o[0] = sum[2]               // R
                        o[planeStride] = sum[1]     // G
                        o[2 * planeStride] = sum[0] // B
                    }
                }
            }
        }}}}}
    }

    /// How many threads a pass over `work` pixels is worth: two or more only for large frames, where
    /// the split pays for itself (a 1080p frame takes milliseconds; a 256² one microseconds).
    static func lanes(work: Int) -> Int {
        work >= 500_000 ? min(max(ProcessInfo.processInfo.activeProcessorCount, 1), 4) : 1
    }

    /// Runs `body` over `lanes` contiguous slices of 0..<count, concurrently when lanes > 1.
    static func forEachSlice(of count: Int, lanes: Int, _ body: (Range<Int>, Int) -> Void) {
        guard lanes > 1, count > 1 else {
            body(0..<count, 0)
            return
        }
        let step = (count + lanes - 1) / lanes
        DispatchQueue.concurrentPerform(iterations: lanes) { lane in
            let rows = min(lane * step, count)..<min((lane + 1) * step, count)
            if !rows.isEmpty { body(rows, lane) }
        }
    }

    /// A float plane (`sourceStride` floats per row) → another float plane.
    public func resample(_ source: UnsafePointer<Float>, sourceStride: Int,
                         into destination: UnsafeMutablePointer<Float>, destinationStride: Int) {
        resampleRows(rowOf: { source + $0 * sourceStride }) { y, values in
            (destination + y * destinationStride).update(from: values, count: targetWidth)
        }
    }

    /// A float plane of values in [0, 1] → an 8-bit plane (rounded, clamped).
    public func resample(_ source: UnsafePointer<Float>, sourceStride: Int, into destination: GrayImage) {
        precondition(destination.width == targetWidth && destination.height == targetHeight)
        let width = targetWidth
        resampleRows(rowOf: { source + $0 * sourceStride }) { y, values in
            let out = destination.base + y * destination.stride
            for x in 0..<width { out[x] = UInt8(min(max(values[x] * 255 + 0.5, 0), 255)) }
        }
    }

    /// An 8-bit plane → a float plane in [0, 1].
    public func resample(_ source: GrayImage, into destination: UnsafeMutablePointer<Float>, destinationStride: Int) {
        var converted = [Float](repeating: 0, count: sourceWidth * sourceHeight)
        for y in 0..<sourceHeight {
            for x in 0..<sourceWidth {
                converted[y * sourceWidth + x] = Float(source.base[y * source.stride + x]) / 255
            }
        }
        converted.withUnsafeBufferPointer { plane in
            resample(plane.baseAddress!, sourceStride: sourceWidth, into: destination, destinationStride: destinationStride)
        }
    }

    /// Horizontal pass once per source row (into `expanded`, targetWidth floats per row), then for each
    /// output row a weighted sum of whole expanded rows: contiguous and vectorisable, which matters
    /// when the target is large (model output → 1080p and above).
    @inline(__always)
    private func resampleRows(rowOf: (Int) -> UnsafePointer<Float>, storeRow: (Int, UnsafePointer<Float>) -> Void) {
        let width = targetWidth
        let hTaps = horizontal.tapCount, vTaps = vertical.tapCount
        let lanes = Resampler.lanes(work: targetWidth * targetHeight)
        if expanded.count != sourceHeight * width { expanded = [Float](repeating: 0, count: sourceHeight * width) }
        if row.count != width * lanes { row = [Float](repeating: 0, count: width * lanes) }
        horizontal.index.withUnsafeBufferPointer { hIndex in
        horizontal.weight.withUnsafeBufferPointer { hWeight in
        vertical.index.withUnsafeBufferPointer { vIndex in
        vertical.weight.withUnsafeBufferPointer { vWeight in
        expanded.withUnsafeMutableBufferPointer { expandedBuffer in
        row.withUnsafeMutableBufferPointer { rowBuffer in
            let rows = expandedBuffer.baseAddress!
            Resampler.forEachSlice(of: sourceHeight, lanes: lanes) { sourceRows, _ in
                for y in sourceRows {
                    let source = rowOf(y), out = rows + y * width
                    for x in 0..<width {
                        var value: Float = 0
                        for t in 0..<hTaps { value += hWeight[x * hTaps + t] * source[hIndex[x * hTaps + t]] }
                        out[x] = value
                    }
                }
            }
            Resampler.forEachSlice(of: targetHeight, lanes: lanes) { targetRows, lane in
                let acc = rowBuffer.baseAddress! + lane * width
                for y in targetRows {
                    acc.update(repeating: 0, count: width)
                    for t in 0..<vTaps {
                        let w = vWeight[y * vTaps + t]
                        if w == 0 { continue }
                        let source = rows + vIndex[y * vTaps + t] * width
                        for x in 0..<width { acc[x] += w * source[x] }
                    }
                    storeRow(y, acc)
                }
            }
        }}}}}}
    }
}
