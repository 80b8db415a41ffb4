import MattePixelTypes

/// Full-size conversions between a BGRA frame and float planes, for networks that take the frame at
/// its own size (RVM: 25 MB of floats a 1080p frame). Rows are cut over the cores; within a row the
/// loops are plain lane-wise code that the AVX2 and AVX-512 builds vectorise. The bytes → float step
/// is a division by 255 (as numpy's `x.astype(float32) / 255`), so every build gives the same floats.
public final class PlaneConverterKernel: PlaneConverting {
    public init() {}

    public func bgraToPlanarRGB(_ image: BGRAImage, into destination: UnsafeMutablePointer<Float>, planeStride: Int) {
        let width = image.width
        Slices.forEach(of: image.height, slices: Slices.count(work: width * image.height)) { rows, _ in
            for y in rows {
                let source = image.base + y * image.stride
                let red = destination + y * width, green = red + planeStride, blue = green + planeStride
                var x = 0
                while x + 8 <= width {  // eight pixels: 32 bytes in, eight floats to each plane
                    let bytes = UnsafeRawPointer(source + 4 * x).loadUnaligned(as: SIMD32<UInt8>.self)
                    let b = SIMD8<Float>(SIMD8<Int32>(truncatingIfNeeded: SIMD8<UInt8>(
                        bytes[0], bytes[4], bytes[8], bytes[12], bytes[16], bytes[20], bytes[24], bytes[28])))
                    let g = SIMD8<Float>(SIMD8<Int32>(truncatingIfNeeded: SIMD8<UInt8>(
                        bytes[1], bytes[5], bytes[9], bytes[13], bytes[17], bytes[21], bytes[25], bytes[29])))
                    let r = SIMD8<Float>(SIMD8<Int32>(truncatingIfNeeded: SIMD8<UInt8>(
                        bytes[2], bytes[6], bytes[10], bytes[14], bytes[18], bytes[22], bytes[26], bytes[30])))
                    UnsafeMutableRawPointer(red + x).storeBytes(of: r / 255, as: SIMD8<Float>.self)
                    UnsafeMutableRawPointer(green + x).storeBytes(of: g / 255, as: SIMD8<Float>.self)
                    UnsafeMutableRawPointer(blue + x).storeBytes(of: b / 255, as: SIMD8<Float>.self)
                    x += 8
                }
                while x < width {
                    red[x] = Float(source[4 * x + 2]) / 255
                    green[x] = Float(source[4 * x + 1]) / 255
                    blue[x] = Float(source[4 * x]) / 255
                    x += 1
                }
            }
        }
    }

    public func planeToGray(_ source: UnsafePointer<Float>, into destination: GrayImage) {
        let width = destination.width
        Slices.forEach(of: destination.height, slices: Slices.count(work: width * destination.height)) { rows, _ in
            for y in rows {
                let input = source + y * width
                let output = destination.base + y * destination.stride
                // A plain loop: LLVM vectorises it (SIMD8's lane-wise conversions here would not be:
                // they were ten times slower, 19 ms a 1080p plane against 1.8).
                for x in 0..<width {
                    var v = input[x] * 255 + 0.5
                    v = v >= 0 ? v : 0  // (NaN too)
                    v = v > 255 ? 255 : v
                    output[x] = UInt8(truncatingIfNeeded: Int32(v))
                }
            }
        }
    }
}
