/* The compiled half of ads_spark.kafka.record_batches: the records section of a Kafka record batch v2
 * to and from the raw buffers of Arrow arrays.
 *
 * Why C: a v2 records section is a sequence of varint-framed records, so it can only be walked record
 * by record; in Python that walk costs 3-5 us a record (about half of a broker's produce throughput),
 * here it costs a few ns a field. Python (record_batches.py) owns the batch header, the CRC, the
 * compression and the Arrow objects; this module only walks records.
 *
 * decode_records(section, record_count, base_timestamp) -> tuple of bytes (see DECODE_FIELDS below)
 *   Two passes over the input: the first checks every length and count against the bytes that are
 *   really there and sums the sizes of the outputs, the second copies. Nothing is allocated from a
 *   claimed size before the first pass has seen those bytes, and every read is bounded by the end
 *   of its own record, so a malformed section raises ValueError naming the record and the field.
 * encode_records(...) -> (bytearray, base_timestamp, max_timestamp, last_offset_delta)
 *   The same walk in reverse from Arrow buffers (any buffer-protocol object), leaving `header_room`
 *   bytes at the start for the caller's batch header.
 * The GIL is released while records are walked (a broker serves many connections).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>

#define MIN_RECORD_BYTES 7 /* length, attributes, timestamp delta, offset delta, key, value, header count */
#define MIN_HEADER_BYTES 2 /* key length, value length */

typedef struct {
    char message[256];
} Error;

static int fail(Error *error, const char *format, ...) __attribute__((format(printf, 2, 3)));
static int fail(Error *error, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(error->message, sizeof(error->message), format, args);
    va_end(args);
    return -1;
}

/* ---- varints (Kafka's: zigzag-encoded, LEB128) ---- */

/* 0 ok, -1 truncated, -2 longer than 5 bytes / more than 32 bits */
static inline int read_varint(const uint8_t **cursor, const uint8_t *end, int32_t *out) {
    const uint8_t *p = *cursor;
    uint32_t value = 0;
    for (int shift = 0; shift <= 28; shift += 7) {
        if (p >= end) return -1;
        uint8_t byte = *p++;
        if (shift == 28 && (byte & 0xF0)) return -2;
        value |= (uint32_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *cursor = p;
            *out = (int32_t)((value >> 1) ^ (~(value & 1) + 1));
            return 0;
        }
    }
    return -2;
}

static inline int read_varlong(const uint8_t **cursor, const uint8_t *end, int64_t *out) {
    const uint8_t *p = *cursor;
    uint64_t value = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (p >= end) return -1;
        uint8_t byte = *p++;
        if (shift == 63 && (byte & 0xFE)) return -2;
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *cursor = p;
            *out = (int64_t)((value >> 1) ^ (~(value & 1) + 1));
            return 0;
        }
    }
    return -2;
}

static inline int varint_size(int64_t signed_value) {
    uint64_t value = ((uint64_t)signed_value << 1) ^ (uint64_t)(signed_value >> 63);
    int size = 1;
    while (value >= 0x80) {
        value >>= 7;
        size++;
    }
    return size;
}

static inline uint8_t *write_varint(uint8_t *p, int64_t signed_value) {
    uint64_t value = ((uint64_t)signed_value << 1) ^ (uint64_t)(signed_value >> 63);
    while (value >= 0x80) {
        *p++ = (uint8_t)(value | 0x80);
        value >>= 7;
    }
    *p++ = (uint8_t)value;
    return p;
}

/* ---- UTF-8 (header keys are Arrow strings) ---- */

static int valid_utf8(const uint8_t *s, int32_t length) {
    int32_t i = 0;
    while (i < length) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int32_t extra;
        uint32_t code;
        if ((c & 0xE0) == 0xC0) { extra = 1; code = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { extra = 2; code = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { extra = 3; code = c & 0x07; }
        else return 0;
        if (i + extra >= length) return 0; /* the sequence runs past the end */
        for (int32_t k = 1; k <= extra; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            code = (code << 6) | (s[i + k] & 0x3F);
        }
        if ((extra == 1 && code < 0x80) || (extra == 2 && code < 0x800) || (extra == 3 && code < 0x10000) ||
            code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
            return 0;
        i += extra + 1;
    }
    return 1;
}

/* ---- decode ---- */

typedef struct {
    Py_ssize_t key_bytes, value_bytes, headers, header_key_bytes, header_value_bytes;
    Py_ssize_t key_nulls, value_nulls, header_value_nulls, records_without_headers;
} Sizes;

typedef struct { /* where pass two writes; NULL validity = no nulls in that column */
    int64_t *timestamps;
    int32_t *offset_deltas;
    int32_t *key_offsets, *value_offsets, *list_offsets, *header_key_offsets, *header_value_offsets;
    uint8_t *key_data, *value_data, *header_key_data, *header_value_data;
    uint8_t *key_validity, *value_validity, *list_validity, *header_value_validity;
    /* what pass one sized them for: pass two stops at these even if the input changed in between (the
     * GIL is released, and a bytearray may be written by another thread) */
    Py_ssize_t key_capacity, value_capacity, headers_capacity, header_key_capacity, header_value_capacity;
} Outputs;

static const char *varint_problem(int status) {
    return status == -1 ? "is truncated" : "is longer than its type allows";
}

/* A length field: -1 (null) when nullable, else 0 .. the bytes left in the record. */
static int read_length(const uint8_t **p, const uint8_t *record_end, int nullable, int32_t *length,
                       Error *error, Py_ssize_t index, const char *what) {
    int status = read_varint(p, record_end, length);
    if (status) return fail(error, "record %zd: %s length %s", index, what, varint_problem(status));
    if (*length < (nullable ? -1 : 0))
        return fail(error, "record %zd: %s length %d is negative", index, what, (int)*length);
    if (*length > record_end - *p)
        return fail(error, "record %zd: %s length %d exceeds the %zd bytes left in the record", index, what,
                    (int)*length, (Py_ssize_t)(record_end - *p));
    return 0;
}

static inline void set_bit(uint8_t *bitmap, Py_ssize_t index) {
    bitmap[index >> 3] |= (uint8_t)(1u << (index & 7));
}

/* The state of one walk over a section. With out == NULL (pass one) every field is checked and the
 * output sizes summed into sizes; with out set (pass two, over bytes pass one accepted, so its checks
 * cannot fail then) the fields are copied to where the *_at positions say. */
typedef struct {
    const uint8_t *p, *end;
    int64_t base_timestamp;
    Sizes *sizes;
    Outputs *out;
    Error *error;
    Py_ssize_t key_at, value_at, header_at, header_key_at, header_value_at;
    int consecutive, increasing;
    int32_t previous_delta;
} Walk;

/* A nullable binary field: its length (-1 null) and where its bytes start; p moves past it. */
static int read_field(Walk *w, const uint8_t *record_end, int nullable, int32_t *length, const uint8_t **bytes,
                      Py_ssize_t index, const char *what) {
    if (read_length(&w->p, record_end, nullable, length, w->error, index, what)) return -1;
    *bytes = w->p;
    w->p += *length > 0 ? *length : 0;
    return 0;
}

static inline int copy_field(uint8_t *data, Py_ssize_t *at, Py_ssize_t capacity, int32_t *offsets, uint8_t *validity,
                             Py_ssize_t index, const uint8_t *bytes, int32_t length) {
    if (length > capacity - *at) return -1;
    if (length >= 0) {
        memcpy(data + *at, bytes, (size_t)length);
        *at += length;
        if (validity) set_bit(validity, index);
    }
    offsets[index + 1] = (int32_t)*at;
    return 0;
}

static int changed(Error *error) { return fail(error, "the records section changed while it was decoded"); }

static int walk_headers(Walk *w, const uint8_t *record_end, Py_ssize_t index, int32_t header_count) {
    Outputs *out = w->out;
    for (int32_t h = 0; h < header_count; h++) {
        int32_t key_length, value_length;
        const uint8_t *key, *value;
        if (read_field(w, record_end, 0, &key_length, &key, index, "header key") ||
            read_field(w, record_end, 1, &value_length, &value, index, "header value"))
            return -1;
        if (out) {
            if (w->header_at >= out->headers_capacity ||
                copy_field(out->header_key_data, &w->header_key_at, out->header_key_capacity,
                           out->header_key_offsets, NULL, w->header_at, key, key_length) ||
                copy_field(out->header_value_data, &w->header_value_at, out->header_value_capacity,
                           out->header_value_offsets, out->header_value_validity, w->header_at, value, value_length))
                return changed(w->error);
            w->header_at++;
        } else {
            if (!valid_utf8(key, key_length))
                return fail(w->error, "record %zd: header %d key is not valid UTF-8", index, (int)h);
            w->sizes->header_key_bytes += key_length;
            if (value_length >= 0) w->sizes->header_value_bytes += value_length;
            else w->sizes->header_value_nulls++;
        }
    }
    return 0;
}

static int walk_record(Walk *w, Py_ssize_t index, Py_ssize_t count) {
    int32_t record_length, key_length, value_length, header_count, offset_delta;
    int64_t timestamp_delta;
    const uint8_t *key, *value;
    int status = read_varint(&w->p, w->end, &record_length);
    if (status) return fail(w->error, "record %zd of %zd: length %s", index, count, varint_problem(status));
    if (record_length < MIN_RECORD_BYTES - 1 || record_length > w->end - w->p)
        return fail(w->error, "record %zd of %zd: length %d does not fit the %zd bytes left in the section", index,
                    count, (int)record_length, (Py_ssize_t)(w->end - w->p));
    const uint8_t *record_end = w->p + record_length;
    w->p++; /* attributes: unused in v2 */
    if ((status = read_varlong(&w->p, record_end, &timestamp_delta)))
        return fail(w->error, "record %zd: timestamp delta %s", index, varint_problem(status));
    if ((status = read_varint(&w->p, record_end, &offset_delta)))
        return fail(w->error, "record %zd: offset delta %s", index, varint_problem(status));
    w->consecutive &= offset_delta == index;
    w->increasing &= offset_delta > w->previous_delta;
    w->previous_delta = offset_delta;
    if (read_field(w, record_end, 1, &key_length, &key, index, "key") ||
        read_field(w, record_end, 1, &value_length, &value, index, "value"))
        return -1;
    if ((status = read_varint(&w->p, record_end, &header_count)))
        return fail(w->error, "record %zd: header count %s", index, varint_problem(status));
    if (header_count < 0 || header_count > (record_end - w->p) / MIN_HEADER_BYTES)
        return fail(w->error, "record %zd: header count %d does not fit the %zd bytes left in the record", index,
                    (int)header_count, (Py_ssize_t)(record_end - w->p));
    Outputs *out = w->out;
    if (out) {
        out->timestamps[index] = (int64_t)((uint64_t)w->base_timestamp + (uint64_t)timestamp_delta);
        out->offset_deltas[index] = offset_delta;
        if (copy_field(out->key_data, &w->key_at, out->key_capacity, out->key_offsets, out->key_validity, index, key,
                       key_length) ||
            copy_field(out->value_data, &w->value_at, out->value_capacity, out->value_offsets, out->value_validity,
                       index, value, value_length))
            return changed(w->error);
    } else {
        if (key_length >= 0) w->sizes->key_bytes += key_length; else w->sizes->key_nulls++;
        if (value_length >= 0) w->sizes->value_bytes += value_length; else w->sizes->value_nulls++;
        if (header_count == 0) w->sizes->records_without_headers++;
        w->sizes->headers += header_count;
    }
    if (walk_headers(w, record_end, index, header_count)) return -1;
    if (out) {
        out->list_offsets[index + 1] = (int32_t)w->header_at;
        if (out->list_validity && header_count > 0) set_bit(out->list_validity, index);
    }
    if (w->p != record_end)
        return fail(w->error, "record %zd: %zd bytes left over after its last header", index,
                    (Py_ssize_t)(record_end - w->p));
    return 0;
}

/* One pass over the section (see Walk); offsets_kind: 2 deltas are 0..n-1, 1 increasing, 0 neither. */
static int walk_records(const uint8_t *data, Py_ssize_t length, Py_ssize_t count, int64_t base_timestamp,
                        Sizes *sizes, Outputs *out, int *offsets_kind, Error *error) {
    Walk w = {data, data + length, base_timestamp, sizes, out, error, 0, 0, 0, 0, 0, 1, 1, -1};
    for (Py_ssize_t index = 0; index < count; index++)
        if (walk_record(&w, index, count)) return -1;
    if (w.p != w.end)
        return fail(error, "%zd bytes left over after the last of %zd records", (Py_ssize_t)(w.end - w.p), count);
    *offsets_kind = w.consecutive ? 2 : (w.increasing && w.previous_delta >= 0 ? 1 : 0);
    return 0;
}

/* A new bytes object of `size` bytes, its buffer stored in *data (zeroed when `zero`). */
static PyObject *new_bytes(Py_ssize_t size, void *data_out, int zero) {
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, size);
    if (!bytes) return NULL;
    *(char **)data_out = PyBytes_AS_STRING(bytes);
    if (zero) memset(PyBytes_AS_STRING(bytes), 0, (size_t)size);
    return bytes;
}

static PyObject *optional_bitmap(Py_ssize_t nulls, Py_ssize_t length, uint8_t **data) {
    if (!nulls) {
        *data = NULL;
        Py_RETURN_NONE;
    }
    return new_bytes((length + 7) / 8, data, 1);
}

/* DECODE_FIELDS (record_batches.py names them in this order):
 * timestamps int64[n], offset_deltas int32[n], offsets_kind (0 not increasing, 1 increasing, 2 == 0..n-1),
 * key_offsets int32[n+1], key_data, key_validity|None, key_nulls,
 * value_offsets, value_data, value_validity|None, value_nulls,
 * list_offsets int32[n+1], list_validity|None, list_nulls (records with no headers),
 * header_key_offsets int32[h+1], header_key_data, header_value_offsets, header_value_data,
 * header_value_validity|None, header_value_nulls, header_count h */
static PyObject *decode_records(PyObject *self, PyObject *args) {
    Py_buffer input;
    Py_ssize_t count;
    long long base_timestamp;
    if (!PyArg_ParseTuple(args, "y*nL:decode_records", &input, &count, &base_timestamp)) return NULL;
    PyObject *result = NULL;
    PyObject *objects[21] = {NULL};
    Error error = {{0}};
    Sizes sizes = {0};
    int offsets_kind = 0, status;
    if (input.len > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "records section of %zd bytes is larger than a batch can be", input.len);
        goto done;
    }
    if (count < 1 || count > input.len / MIN_RECORD_BYTES) {
        PyErr_Format(PyExc_ValueError, "record count %zd is impossible for a records section of %zd bytes",
                     count, input.len);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    status = walk_records(input.buf, input.len, count, base_timestamp, &sizes, NULL, &offsets_kind, &error);
    Py_END_ALLOW_THREADS
    if (status) {
        PyErr_SetString(PyExc_ValueError, error.message);
        goto done;
    }
    Outputs out;
    Py_ssize_t h = sizes.headers;
    if (!(objects[0] = new_bytes(count * 8, &out.timestamps, 0)) ||
        !(objects[1] = new_bytes(count * 4, &out.offset_deltas, 0)) ||
        !(objects[3] = new_bytes((count + 1) * 4, &out.key_offsets, 0)) ||
        !(objects[4] = new_bytes(sizes.key_bytes, &out.key_data, 0)) ||
        !(objects[5] = optional_bitmap(sizes.key_nulls, count, &out.key_validity)) ||
        !(objects[7] = new_bytes((count + 1) * 4, &out.value_offsets, 0)) ||
        !(objects[8] = new_bytes(sizes.value_bytes, &out.value_data, 0)) ||
        !(objects[9] = optional_bitmap(sizes.value_nulls, count, &out.value_validity)) ||
        !(objects[11] = new_bytes((count + 1) * 4, &out.list_offsets, 0)) ||
        !(objects[12] = optional_bitmap(sizes.records_without_headers, count, &out.list_validity)) ||
        !(objects[14] = new_bytes((h + 1) * 4, &out.header_key_offsets, 0)) ||
        !(objects[15] = new_bytes(sizes.header_key_bytes, &out.header_key_data, 0)) ||
        !(objects[16] = new_bytes((h + 1) * 4, &out.header_value_offsets, 0)) ||
        !(objects[17] = new_bytes(sizes.header_value_bytes, &out.header_value_data, 0)) ||
        !(objects[18] = optional_bitmap(sizes.header_value_nulls, h, &out.header_value_validity)))
        goto done;
    out.key_capacity = sizes.key_bytes;
    out.value_capacity = sizes.value_bytes;
    out.headers_capacity = h;
    out.header_key_capacity = sizes.header_key_bytes;
    out.header_value_capacity = sizes.header_value_bytes;
    out.key_offsets[0] = out.value_offsets[0] = out.list_offsets[0] = 0;
    out.header_key_offsets[0] = out.header_value_offsets[0] = 0;
    Py_BEGIN_ALLOW_THREADS
    status = walk_records(input.buf, input.len, count, base_timestamp, &sizes, &out, &offsets_kind, &error);
    Py_END_ALLOW_THREADS
    if (status) { /* only if the bytes changed since pass one accepted them */
        PyErr_SetString(PyExc_ValueError, error.message);
        goto done;
    }
    if (!(objects[2] = PyLong_FromLong(offsets_kind)) || !(objects[6] = PyLong_FromSsize_t(sizes.key_nulls)) ||
        !(objects[10] = PyLong_FromSsize_t(sizes.value_nulls)) ||
        !(objects[13] = PyLong_FromSsize_t(sizes.records_without_headers)) ||
        !(objects[19] = PyLong_FromSsize_t(sizes.header_value_nulls)) || !(objects[20] = PyLong_FromSsize_t(h)))
        goto done;
    result = PyTuple_New(21);
    if (result)
        for (int i = 0; i < 21; i++) {
            PyTuple_SET_ITEM(result, i, objects[i]);
            objects[i] = NULL;
        }
done:
    for (int i = 0; i < 21; i++) Py_XDECREF(objects[i]);
    PyBuffer_Release(&input);
    return result;
}

/* ---- encode ---- */

/* An Arrow binary/string/list column as encode_records receives it: validity (absent = no nulls), int32
 * offsets, data (absent for a list), and the array's offset into them. */
typedef struct {
    Py_buffer validity, offsets, data;
    int has_validity, has_offsets, has_data;
    Py_ssize_t offset;
} Column;

static int get_buffer(PyObject *object, Py_buffer *view, int *has) {
    *has = 0;
    if (object == Py_None) return 0;
    if (PyObject_GetBuffer(object, view, PyBUF_SIMPLE) < 0) return -1;
    *has = 1;
    return 0;
}

static void release_column(Column *column) {
    if (column->has_validity) PyBuffer_Release(&column->validity);
    if (column->has_offsets) PyBuffer_Release(&column->offsets);
    if (column->has_data) PyBuffer_Release(&column->data);
}

/* Fill `column` from its tuple (validity|None, offsets, data|None, array_offset) and check that its
 * buffers hold `length` values whose offsets never decrease and stay inside 0 .. limit (limit < 0: the
 * data buffer's length). The walk then trusts them. */
static int get_column(PyObject *tuple, Column *column, Py_ssize_t length, Py_ssize_t limit, const char *name) {
    PyObject *validity, *offsets, *data;
    if (!PyArg_ParseTuple(tuple, "OOOn", &validity, &offsets, &data, &column->offset)) return -1;
    if (get_buffer(validity, &column->validity, &column->has_validity) ||
        get_buffer(offsets, &column->offsets, &column->has_offsets) ||
        get_buffer(data, &column->data, &column->has_data))
        return -1;
    if (column->offset < 0 || column->offset > INT32_MAX || !column->has_offsets ||
        (column->offset + length + 1) * 4 > column->offsets.len ||
        (column->has_validity && (column->offset + length + 7) / 8 > column->validity.len)) {
        PyErr_Format(PyExc_ValueError, "column %s: buffers too small for %zd values at offset %zd", name, length,
                     column->offset);
        return -1;
    }
    if (limit < 0) limit = column->has_data ? column->data.len : 0;
    const int32_t *o = (const int32_t *)column->offsets.buf + column->offset;
    if (o[0] < 0 || o[length] > limit) goto bad;
    for (Py_ssize_t i = 0; i < length; i++)
        if (o[i + 1] < o[i]) goto bad;
    return 0;
bad:
    PyErr_Format(PyExc_ValueError, "column %s: offsets decrease or leave its data", name);
    return -1;
}

static inline int is_valid(const Column *column, Py_ssize_t index) {
    if (!column->has_validity) return 1;
    Py_ssize_t bit = column->offset + index;
    return (((const uint8_t *)column->validity.buf)[bit >> 3] >> (bit & 7)) & 1;
}

static inline int32_t start_of(const Column *column, Py_ssize_t index) {
    return ((const int32_t *)column->offsets.buf)[column->offset + index];
}

static inline int32_t length_of(const Column *column, Py_ssize_t index) { /* -1 = null */
    if (!is_valid(column, index)) return -1;
    return start_of(column, index + 1) - start_of(column, index);
}

static inline Py_ssize_t field_size(int32_t length) { return varint_size(length) + (length > 0 ? length : 0); }

static inline uint8_t *write_field(uint8_t *p, const Column *column, Py_ssize_t index, int32_t length) {
    p = write_varint(p, length);
    if (length > 0) {
        memcpy(p, (const uint8_t *)column->data.buf + start_of(column, index), (size_t)length);
        p += length;
    }
    return p;
}

typedef struct {
    Py_ssize_t count;
    int64_t base_offset;
    const int64_t *offsets, *timestamps;
    Column key, value, list, header_key, header_value;
    int has_headers; /* list offsets present: some record has headers */
} EncodeInput;

static inline int32_t header_count_of(const EncodeInput *in, Py_ssize_t index) {
    if (!in->has_headers || !is_valid(&in->list, index)) return 0;
    return start_of(&in->list, index + 1) - start_of(&in->list, index);
}

/* Pass one: each record's size (without its length prefix) into sizes[], the total, the checks. */
static int size_records(const EncodeInput *in, int32_t *sizes, Py_ssize_t *total, int64_t *max_timestamp,
                        Error *error) {
    int64_t previous_delta = -1, base_timestamp = in->timestamps[0];
    *max_timestamp = base_timestamp;
    *total = 0;
    for (Py_ssize_t i = 0; i < in->count; i++) {
        int64_t offset_delta = (int64_t)((uint64_t)in->offsets[i] - (uint64_t)in->base_offset);
        if (offset_delta <= previous_delta || offset_delta > INT32_MAX)
            return fail(error, "row %zd: offset %lld does not follow the previous row's inside the batch "
                        "starting at %lld", i, (long long)in->offsets[i], (long long)in->base_offset);
        previous_delta = offset_delta;
        int64_t timestamp = in->timestamps[i];
        if (timestamp > *max_timestamp) *max_timestamp = timestamp;
        Py_ssize_t size = 1 + varint_size((int64_t)((uint64_t)timestamp - (uint64_t)base_timestamp)) +
                          varint_size(offset_delta) + field_size(length_of(&in->key, i)) +
                          field_size(length_of(&in->value, i));
        int32_t headers = header_count_of(in, i);
        size += varint_size(headers);
        for (int32_t h = 0, at = headers ? start_of(&in->list, i) : 0; h < headers; h++, at++)
            size += field_size(length_of(&in->header_key, at)) + field_size(length_of(&in->header_value, at));
        if (size > INT32_MAX - 8)
            return fail(error, "row %zd: a record of %zd bytes is larger than Kafka allows", i, size);
        sizes[i] = (int32_t)size;
        *total += varint_size(size) + size;
        if (*total > INT32_MAX - 128)
            return fail(error, "a batch of more than %d bytes cannot be framed", INT32_MAX - 128);
    }
    return 0;
}

static void write_records(const EncodeInput *in, const int32_t *sizes, uint8_t *p) {
    int64_t base_timestamp = in->timestamps[0];
    for (Py_ssize_t i = 0; i < in->count; i++) {
        p = write_varint(p, sizes[i]);
        *p++ = 0; /* record attributes: unused in v2 */
        p = write_varint(p, (int64_t)((uint64_t)in->timestamps[i] - (uint64_t)base_timestamp));
        p = write_varint(p, (int64_t)((uint64_t)in->offsets[i] - (uint64_t)in->base_offset));
        p = write_field(p, &in->key, i, length_of(&in->key, i));
        p = write_field(p, &in->value, i, length_of(&in->value, i));
        int32_t headers = header_count_of(in, i);
        p = write_varint(p, headers);
        for (int32_t h = 0, at = headers ? start_of(&in->list, i) : 0; h < headers; h++, at++) {
            p = write_field(p, &in->header_key, at, length_of(&in->header_key, at));
            p = write_field(p, &in->header_value, at, length_of(&in->header_value, at));
        }
    }
}

/* encode_records(count, base_offset, offsets, offsets_at, timestamps, timestamps_at, key, value, headers,
 *                header_key, header_value, header_room)
 * offsets / timestamps: int64 buffers and the arrays' offsets into them; key, value, header_key,
 * header_value: (validity|None, int32 offsets, data|None, array_offset); headers: the list column
 * (validity|None, int32 offsets|None, None, array_offset), offsets None when no record has headers
 * (header_key/header_value are then not read). The output starts with header_room zero bytes for the
 * caller's batch header. */
static PyObject *encode_records(PyObject *self, PyObject *args) {
    EncodeInput in;
    memset(&in, 0, sizeof in);
    Py_ssize_t offsets_at, timestamps_at, header_room, total = 0;
    long long base_offset;
    PyObject *offsets_object, *timestamps_object, *key_tuple, *value_tuple, *list_tuple, *hkey_tuple, *hvalue_tuple;
    if (!PyArg_ParseTuple(args, "nLOnOnO!O!O!O!O!n:encode_records", &in.count, &base_offset, &offsets_object,
                          &offsets_at, &timestamps_object, &timestamps_at, &PyTuple_Type, &key_tuple,
                          &PyTuple_Type, &value_tuple, &PyTuple_Type, &list_tuple, &PyTuple_Type, &hkey_tuple,
                          &PyTuple_Type, &hvalue_tuple, &header_room))
        return NULL;
    in.base_offset = base_offset;
    PyObject *result = NULL, *output = NULL;
    Py_buffer offsets_view, timestamps_view;
    int has_offsets = 0, has_timestamps = 0, status;
    int32_t *sizes = NULL;
    int64_t max_timestamp = 0;
    Error error = {{0}};
    if (in.count < 1 || in.count > INT32_MAX || header_room < 0 || header_room > 4096) {
        PyErr_Format(PyExc_ValueError, "cannot encode %zd records with %zd bytes of header room", in.count,
                     header_room);
        goto done;
    }
    if (get_buffer(offsets_object, &offsets_view, &has_offsets) ||
        get_buffer(timestamps_object, &timestamps_view, &has_timestamps))
        goto done;
    if (!has_offsets || !has_timestamps || offsets_at < 0 || timestamps_at < 0 || offsets_at > INT32_MAX ||
        timestamps_at > INT32_MAX || in.count > INT32_MAX ||
        (offsets_at + in.count) * 8 > offsets_view.len || (timestamps_at + in.count) * 8 > timestamps_view.len) {
        PyErr_SetString(PyExc_ValueError, "offset or timestamp buffer too small for the records");
        goto done;
    }
    in.offsets = (const int64_t *)offsets_view.buf + offsets_at;
    in.timestamps = (const int64_t *)timestamps_view.buf + timestamps_at;
    if (get_column(key_tuple, &in.key, in.count, -1, "key") ||
        get_column(value_tuple, &in.value, in.count, -1, "value"))
        goto done;
    if (PyTuple_GET_SIZE(list_tuple) == 4 && PyTuple_GET_ITEM(list_tuple, 1) != Py_None) {
        in.has_headers = 1;
        if (get_column(list_tuple, &in.list, in.count, INT32_MAX, "headers")) goto done;
        Py_ssize_t headers_end = start_of(&in.list, in.count);
        if (get_column(hkey_tuple, &in.header_key, headers_end, -1, "header key") ||
            get_column(hvalue_tuple, &in.header_value, headers_end, -1, "header value"))
            goto done;
        if (in.header_key.has_validity) {
            PyErr_SetString(PyExc_ValueError, "header keys must not be null");
            goto done;
        }
    }
    if (!(sizes = PyMem_Malloc((size_t)in.count * sizeof(int32_t)))) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    status = size_records(&in, sizes, &total, &max_timestamp, &error);
    Py_END_ALLOW_THREADS
    if (status) {
        PyErr_SetString(PyExc_ValueError, error.message);
        goto done;
    }
    if (!(output = PyByteArray_FromStringAndSize(NULL, header_room + total))) goto done;
    uint8_t *start = (uint8_t *)PyByteArray_AS_STRING(output);
    memset(start, 0, (size_t)header_room);
    Py_BEGIN_ALLOW_THREADS
    write_records(&in, sizes, start + header_room);
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("OLLL", output, (long long)in.timestamps[0], (long long)max_timestamp,
                           (long long)(in.offsets[in.count - 1] - in.base_offset));
done:
    release_column(&in.key);
    release_column(&in.value);
    release_column(&in.list);
    release_column(&in.header_key);
    release_column(&in.header_value);
    if (has_offsets) PyBuffer_Release(&offsets_view);
    if (has_timestamps) PyBuffer_Release(&timestamps_view);
    PyMem_Free(sizes);
    Py_XDECREF(output);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_VARARGS,
     "decode_records(section, record_count, base_timestamp) -> tuple of Arrow buffers (see the source)"},
    {"encode_records", encode_records, METH_VARARGS,
     "encode_records(...) -> (bytearray, base_timestamp, max_timestamp, last_offset_delta)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ads_spark.kafka._record_codec",
    "Kafka record batch v2 records section <-> Arrow buffers (compiled; see record_batches.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__record_codec(void) { return PyModule_Create(&module); }
