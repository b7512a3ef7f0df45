package org.kgbrink.hadoop;

import java.io.IOException;

import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.S3AFileSystem;

/**
 * S3A whose rename onto an existing file returns false, as HDFS's does, instead of throwing
 * FileAlreadyExistsException (HADOOP-13823). Spark's reliable checkpoint writes each partition to a temporary file
 * and renames it; when a task's first attempt renamed its file and then lost its executor before reporting, the
 * retry's rename finds the file there. Spark expects false, keeps the first file and goes on; S3A's exception failed
 * every retry and so the job.
 */
public class RenameSafeS3AFileSystem extends S3AFileSystem {
  @Override
  public boolean rename(Path source, Path target) throws IOException {
    try {
      return super.rename(source, target);
    } catch (FileAlreadyExistsException exists) {
      return false;
    }
  }
}
