// A file mapped into the process (mmap), for memory other processes wrote once and this one only reads:
// the published shards of a frozen model in /dev/shm (@torl-ts/actors' collective.publish), read where
// they lie instead of copied per pass.
#include <napi.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>

#include "args.h"
#include "functions.h"

namespace torl_blas {

namespace {

// A whole number of bytes in [min, 2^53).
bool ReadBytes(const Napi::Env& env, const Napi::Value& value, const char* fn, const char* name, double min,
               size_t* out) {
  const double v = value.IsNumber() ? value.As<Napi::Number>().DoubleValue() : -1;
  if (!value.IsNumber() || !std::isfinite(v) || v != std::floor(v) || v < min || v >= 9007199254740992.0) {
    Napi::RangeError::New(env, std::string(fn) + ": " + name + " must be a whole number of bytes of at least " +
                                   std::to_string(static_cast<int64_t>(min)))
        .ThrowAsJavaScriptException();
    return false;
  }
  *out = static_cast<size_t>(v);
  return true;
}

size_t PageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// An ArrayBuffer over `length` mapped bytes at `at`, unmapped when it is collected.
Napi::ArrayBuffer MappedBuffer(Napi::Env env, void* at, size_t length) {
  return Napi::ArrayBuffer::New(
      env, at, length, [](Napi::Env, void* data, size_t* bytes) {
        munmap(data, *bytes);
        delete bytes;
      },
      new size_t(length));
}

// What an mmap of `length` bytes returned, as an ArrayBuffer (MappedBuffer); on failure `failed` ("mapFile:
// mmap of fd 3") and errno's reason are thrown.
Napi::Value MappedOrThrow(Napi::Env env, void* at, size_t length, const std::string& failed) {
  if (at == MAP_FAILED) {
    Napi::Error::New(env, failed + " failed: " + strerror(errno)).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return MappedBuffer(env, at, length);
}

}  // namespace

// mapFile(fd, length): an ArrayBuffer over the first `length` bytes of the file open as `fd`, mapped
// private (a write, which nothing should make, changes this process's copy of the page, never the file)
// and readable from the file's own pages: nothing is copied. Unmapped when the buffer is collected. A
// file shorter than `length` leaves the pages past its end unreadable (SIGBUS): map what was written.
Napi::Value MapFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "mapFile", 2)) return env.Undefined();
  size_t fd = 0, length = 0;
  if (!ReadBytes(env, info[0], "mapFile", "fd", 0, &fd) || !ReadBytes(env, info[1], "mapFile", "length", 1, &length))
    return env.Undefined();
  void* at = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE, static_cast<int>(fd), 0);
  return MappedOrThrow(env, at, length, "mapFile: mmap of fd " + std::to_string(fd));
}

// reserveMapping(length): an ArrayBuffer of `length` bytes of private, zero-filled memory whose pages
// mapFileInto can then map files into (address space only until a page is touched). Unmapped when the
// buffer is collected.
Napi::Value ReserveMapping(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "reserveMapping", 1)) return env.Undefined();
  size_t length = 0;
  if (!ReadBytes(env, info[0], "reserveMapping", "length", 1, &length)) return env.Undefined();
  void* at = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return MappedOrThrow(env, at, length, "reserveMapping: mmap of " + std::to_string(length) + " bytes");
}

// mapFileInto(buffer, byteOffset, fd, fileOffset, byteLength): the bytes [byteOffset, byteOffset +
// byteLength) of a reserveMapping buffer become file `fd`'s from `fileOffset`, mapped as mapFile maps
// (private, read where the file holds them). Offsets and length are whole pages (pageSize()).
Napi::Value MapFileInto(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "mapFileInto", 5)) return env.Undefined();
  if (!info[0].IsArrayBuffer()) {
    Napi::TypeError::New(env, "mapFileInto: buffer must be an ArrayBuffer from reserveMapping")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::ArrayBuffer buffer = info[0].As<Napi::ArrayBuffer>();
  size_t offset = 0, fd = 0, fileOffset = 0, length = 0;
  if (!ReadBytes(env, info[1], "mapFileInto", "byteOffset", 0, &offset) ||
      !ReadBytes(env, info[2], "mapFileInto", "fd", 0, &fd) ||
      !ReadBytes(env, info[3], "mapFileInto", "fileOffset", 0, &fileOffset) ||
      !ReadBytes(env, info[4], "mapFileInto", "byteLength", 1, &length))
    return env.Undefined();
  const uintptr_t base = reinterpret_cast<uintptr_t>(buffer.Data()), page = PageSize();
  if (base % page != 0 || offset % page != 0 || fileOffset % page != 0 || length % page != 0) {
    Napi::RangeError::New(env, "mapFileInto: the buffer, byteOffset, fileOffset and byteLength must be whole pages of " +
                                   std::to_string(page) + " bytes")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (offset + length > buffer.ByteLength()) {
    Napi::RangeError::New(env, "mapFileInto: the range runs past the buffer").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  void* at = mmap(reinterpret_cast<void*>(base + offset), length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED,
                  static_cast<int>(fd), static_cast<off_t>(fileOffset));
  if (at == MAP_FAILED)
    Napi::Error::New(env, std::string("mapFileInto: mmap of fd ") + std::to_string(fd) + " failed: " + strerror(errno))
        .ThrowAsJavaScriptException();
  return env.Undefined();
}

// pageSize(): the bytes of a page (mapFileInto's unit).
Napi::Value PageSizeOf(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "pageSize", 0)) return env.Undefined();
  return Napi::Number::New(env, static_cast<double>(PageSize()));
}

// releaseMapped(buffer, byteOffset, byteLength): a mapFile or reserveMapping buffer's pages that cover
// those bytes leave this process's resident set (madvise MADV_DONTNEED): a file's pages are read from
// the file again, the others read as zeros. Changes a write made there are dropped.
Napi::Value ReleaseMapped(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "releaseMapped", 3)) return env.Undefined();
  if (!info[0].IsArrayBuffer()) {
    Napi::TypeError::New(env, "releaseMapped: buffer must be an ArrayBuffer from mapFile or reserveMapping")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::ArrayBuffer buffer = info[0].As<Napi::ArrayBuffer>();
  size_t offset = 0, length = 0;
  if (!ReadBytes(env, info[1], "releaseMapped", "byteOffset", 0, &offset) ||
      !ReadBytes(env, info[2], "releaseMapped", "byteLength", 0, &length))
    return env.Undefined();
  if (offset + length > buffer.ByteLength()) {
    Napi::RangeError::New(env, "releaseMapped: the range runs past the buffer").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (length == 0) return env.Undefined();
  const uintptr_t base = reinterpret_cast<uintptr_t>(buffer.Data()), page = PageSize();
  // mapFile's buffers start on a page; pages the range only touches are released too
  if (base % page != 0) {
    Napi::TypeError::New(env, "releaseMapped: buffer must be an ArrayBuffer from mapFile or reserveMapping")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const uintptr_t from = (base + offset) / page * page;
  const uintptr_t to = std::min<uintptr_t>((base + offset + length + page - 1) / page * page,
                                           (base + buffer.ByteLength() + page - 1) / page * page);
  if (madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED) != 0) {
    Napi::Error::New(env, std::string("releaseMapped: madvise failed: ") + strerror(errno)).ThrowAsJavaScriptException();
  }
  return env.Undefined();
}

// trimHeap(): glibc's malloc gives the kernel back every whole free page it holds (malloc_trim), also those
// inside its heaps: after a phase whose transients will not come again (loading a model), with the
// worker's thresholds raised to keep freed memory for reuse. True when pages went back; false where
// the C library is not glibc.
Napi::Value TrimHeap(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "trimHeap", 0)) return env.Undefined();
#ifdef __GLIBC__
  return Napi::Boolean::New(env, malloc_trim(0) != 0);
#else
  return Napi::Boolean::New(env, false);
#endif
}

}  // namespace torl_blas
